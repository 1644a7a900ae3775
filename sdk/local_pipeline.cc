#include "sdk/local_pipeline.h"

#include <signal.h>
#include <unistd.h>

#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "sdk/client.h"

namespace hap::sdk {
namespace {

namespace fs = std::filesystem;

// The port of hap-prefill's "... openai on HOST:PORT (...)" line; 0 for any other line.
int ParseOpenAiPort(const std::string& line) {
  const size_t at = line.find(" openai on ");
  if (at == std::string::npos) return 0;
  const size_t begin = at + 11;
  const std::string address = line.substr(begin, line.find(' ', begin) - begin);
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port)) return 0;
  return port;
}

bool HasBinaries(const fs::path& dir) {
  std::error_code ec;
  return fs::exists(dir / "hap-prefill", ec) && fs::exists(dir / "hap-encoder", ec) &&
         fs::exists(dir / "hap-decode", ec);
}

}  // namespace

const char* ServiceBinary(Service service) {
  switch (service) {
    case Service::kEncoder:
      return "hap-encoder";
    case Service::kPrefill:
      return "hap-prefill";
    case Service::kDecode:
      return "hap-decode";
  }
  return "";
}

std::string FindServiceBinDir() {
  if (const char* env = std::getenv("HAP_BIN_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (const fs::path& dir : {exe.parent_path(), exe.parent_path() / "../../bin"}) {
      if (HasBinaries(dir)) return fs::weakly_canonical(dir, ec).string();
    }
  }
  return HAP_SERVICE_BIN_DIR;
}

std::string LocalPipeline::address(Service service) const {
  return absl::StrCat(options_.host, ":", ports_[Index(service)]);
}

std::string LocalPipeline::openai_address() const {
  if (options_.openai_port < 0) return "";
  return absl::StrCat(options_.host, ":", openai_port_);
}

std::vector<std::string> LocalPipeline::decode_addresses() const {
  std::vector<std::string> out = {address(Service::kDecode)};
  for (int port : extra_decode_ports_) out.push_back(absl::StrCat(options_.host, ":", port));
  return out;
}

std::vector<std::string> LocalPipeline::Argv(Service service, int port, int replica) const {
  std::vector<std::string> argv = {(fs::path(options_.bin_dir) / ServiceBinary(service)).string(),
                                   "--host", options_.host, "--port", std::to_string(port),
                                   "--pool-spin-us", std::to_string(options_.pool_spin_us)};
  if (!options_.model_dir.empty()) {
    argv.push_back("--model");
    argv.push_back(options_.model_dir);
  }
  const std::vector<std::string>* extra = &options_.encoder_args;
  if (service == Service::kPrefill) {
    extra = &options_.prefill_args;
    std::vector<std::string> decodes = decode_addresses();
    decodes.insert(decodes.end(), options_.external_decode_addresses.begin(),
                   options_.external_decode_addresses.end());
    std::vector<std::string> encoders = {address(Service::kEncoder)};
    encoders.insert(encoders.end(), options_.external_encoder_addresses.begin(),
                    options_.external_encoder_addresses.end());
    argv.insert(argv.end(), {"--encoder-addr", absl::StrJoin(encoders, ","), "--decode-addr",
                             absl::StrJoin(decodes, ",")});
    if (options_.openai_port >= 0) {
      argv.insert(argv.end(), {"--openai-port", std::to_string(openai_port_ > 0
                                                                   ? openai_port_
                                                                   : options_.openai_port)});
    }
  } else if (service == Service::kDecode) {
    extra = &options_.decode_args;
  }
  if (!options_.kv_dtype.empty() && service != Service::kEncoder) {
    argv.insert(argv.end(), {"--kv-dtype", options_.kv_dtype});
  }
  argv.insert(argv.end(), extra->begin(), extra->end());
  if (service == Service::kDecode &&
      replica < static_cast<int>(options_.decode_replica_args.size())) {
    const std::vector<std::string>& own = options_.decode_replica_args[replica];
    argv.insert(argv.end(), own.begin(), own.end());
  }
  return argv;
}

absl::StatusOr<std::unique_ptr<ChildProcess>> LocalPipeline::Spawn(Service service, int port,
                                                                  int* bound, int replica) {
  const std::string prefix =
      options_.echo_output ? absl::StrCat("[", ServiceBinary(service), "]") : "";
  auto child = ChildProcess::Spawn(Argv(service, port, replica), prefix);
  if (!child.ok()) return child.status();
  auto line = (*child)->WaitForLine(
      [](const std::string& l) { return ParseListeningPort(l) > 0; }, options_.start_timeout);
  if (!line.ok()) {
    return absl::UnavailableError(absl::StrCat(
        ServiceBinary(service), " did not start listening: ", line.status().message()));
  }
  *bound = ParseListeningPort(*line);
  return child;
}

absl::Status LocalPipeline::Launch(Service service, int port) {
  auto child = Spawn(service, port, &ports_[Index(service)]);
  if (!child.ok()) return child.status();
  procs_[Index(service)] = std::move(*child);
  return absl::OkStatus();
}

absl::Status LocalPipeline::WaitServing(Service service) {
  return WaitServingAt(process(service), ServiceBinary(service), address(service));
}

absl::Status LocalPipeline::WaitServingAt(ChildProcess* child, const char* name,
                                          const std::string& address) {
  // Health checks in short rounds, so a child that exits (a bad flag, a model that does not load)
  // is reported at once instead of after the whole start timeout.
  const auto end = std::chrono::steady_clock::now() + options_.start_timeout;
  absl::Status last;
  while (std::chrono::steady_clock::now() < end) {
    if (!child->running()) {
      return absl::UnavailableError(
          absl::StrCat(name, " exited with code ", child->Wait(std::chrono::seconds(0)).value_or(-1),
                       " before serving (its stderr says why)"));
    }
    last = WaitUntilServing(address, std::chrono::milliseconds(500));
    if (last.ok()) return last;
  }
  return absl::UnavailableError(absl::StrCat(name, ": ", last.message()));
}

absl::StatusOr<std::unique_ptr<LocalPipeline>> LocalPipeline::Start(
    const LocalPipelineOptions& options) {
  std::unique_ptr<LocalPipeline> p(new LocalPipeline());
  p->options_ = options;
  if (p->options_.bin_dir.empty()) p->options_.bin_dir = FindServiceBinDir();
  if (!HasBinaries(p->options_.bin_dir)) {
    return absl::NotFoundError(
        absl::StrCat("hap-encoder, hap-prefill and hap-decode are not all in '",
                     p->options_.bin_dir, "' (set HAP_BIN_DIR)"));
  }
  if (options.decode_replicas < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("decode_replicas = ", options.decode_replicas, " must be at least 1"));
  }
  for (Service s : {Service::kEncoder, Service::kDecode}) {
    if (absl::Status st = p->Launch(s, 0); !st.ok()) return st;
  }
  for (int i = 1; i < options.decode_replicas; ++i) {
    int port = 0;
    auto child = p->Spawn(Service::kDecode, 0, &port, i);
    if (!child.ok()) return child.status();
    p->extra_decodes_.push_back(std::move(*child));
    p->extra_decode_ports_.push_back(port);
  }
  if (absl::Status st = p->Launch(Service::kPrefill, 0); !st.ok()) return st;
  for (Service s : {Service::kEncoder, Service::kDecode, Service::kPrefill}) {
    if (absl::Status st = p->WaitServing(s); !st.ok()) return st;
  }
  if (options.openai_port >= 0) {
    // Printed before hap-prefill reports SERVING: "hap-prefill openai on HOST:PORT (...)".
    auto line = p->process(Service::kPrefill)
                    ->WaitForLine([](const std::string& l) { return ParseOpenAiPort(l) > 0; },
                                  std::chrono::seconds(5));
    if (!line.ok()) {
      return absl::UnavailableError(
          absl::StrCat("hap-prefill did not report its OpenAI API port: ", line.status().message()));
    }
    p->openai_port_ = ParseOpenAiPort(*line);
  }
  for (size_t i = 0; i < p->extra_decodes_.size(); ++i) {
    if (absl::Status st = p->WaitServingAt(p->extra_decodes_[i].get(), "hap-decode",
                                           p->decode_addresses()[i + 1]);
        !st.ok()) {
      return st;
    }
  }
  return p;
}

LocalPipeline::~LocalPipeline() { Stop().IgnoreError(); }

void LocalPipeline::Kill(Service service) {
  ChildProcess* c = process(service);
  if (c == nullptr) return;
  c->Signal(SIGKILL);
  c->Wait(std::chrono::seconds(10));
}

absl::Status LocalPipeline::Restart(Service service) {
  if (process(service) != nullptr && process(service)->running()) Kill(service);
  procs_[Index(service)].reset();
  if (absl::Status st = Launch(service, ports_[Index(service)]); !st.ok()) return st;
  return WaitServing(service);
}

absl::Status LocalPipeline::Stop(std::chrono::milliseconds grace) {
  absl::Status result;
  for (Service s : {Service::kPrefill, Service::kEncoder, Service::kDecode}) {
    ChildProcess* c = process(s);
    if (c == nullptr) continue;
    if (!c->running()) continue;
    c->Signal(SIGTERM);
  }
  for (Service s : {Service::kPrefill, Service::kEncoder, Service::kDecode}) {
    ChildProcess* c = process(s);
    if (c == nullptr) continue;
    std::optional<int> code = c->Wait(grace);
    if (!code) code = c->Terminate(std::chrono::milliseconds(0));
    if (*code != 0 && result.ok()) {
      result = absl::InternalError(absl::StrCat(ServiceBinary(s), " exited with ", *code));
    }
    procs_[Index(s)].reset();
  }
  for (auto& c : extra_decodes_) {
    if (c->running()) c->Signal(SIGTERM);
  }
  for (auto& c : extra_decodes_) {
    std::optional<int> code = c->Wait(grace);
    if (!code) code = c->Terminate(std::chrono::milliseconds(0));
    if (*code != 0 && result.ok()) {
      result = absl::InternalError(absl::StrCat("hap-decode replica exited with ", *code));
    }
  }
  extra_decodes_.clear();
  return result;
}

}  // namespace hap::sdk
