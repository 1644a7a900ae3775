// Command-line access to runtime/image for the PIL parity test (pil_parity.py). Results are
// written as .npy files; errors go to stderr with exit status 2.
//   image_tool decode IN OUT.npy                      U8 [h, w, 3]
//   image_tool resize IN W H OUT.npy [FILTER]         U8 [H, W, 3] of Resize(decode(IN))
//   image_tool region IN OW OH X0 Y0 W H OUT.npy      ResizeBicubicRegion
//   image_tool preprocess IN SIZE OUT.npy [FILTER]    F32 [3, SIZE, SIZE]
// FILTER is PIL's number: 3 = bicubic (default), 2 = bilinear.
//   image_tool encode IN OUT.png                      WritePng(decode(IN))
//   image_tool qwen2vl IN CONFIG.json OUT.npy         F32 [patches, 3*T*P*P] of
//       Qwen2VLPreprocess(decode(IN)) with the preprocessor_config.json CONFIG; prints
//       "grid T H W resized HEIGHT WIDTH" on stdout
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/image/clip_preprocess.h"
#include "runtime/image/image.h"
#include "runtime/image/png_encode.h"
#include "runtime/image/qwen2vl_preprocess.h"
#include "runtime/image/resize.h"
#include "runtime/io/preprocessor_config.h"

namespace {

// NumPy .npy version 1.0: magic, header length, a Python dict literal padded to 64 bytes.
void WriteNpy(const std::string& path, const char* descr, const std::vector<size_t>& shape,
              const void* data, size_t bytes) {
  std::string dims;
  for (size_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, " +
                       "'shape': (" + dims + "), }";
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  const char len_bytes[2] = {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8)};
  out.write(len_bytes, 2);
  out << header;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

void WriteImage(const std::string& path, const hap::RgbImage& img) {
  WriteNpy(path, "|u1",
           {static_cast<size_t>(img.height), static_cast<size_t>(img.width), size_t{3}},
           img.pixels.data(), img.pixels.size());
}

hap::ResampleFilter FilterArg(int argc, char** argv, int i) {
  return argc > i && std::atoi(argv[i]) == 2 ? hap::ResampleFilter::kBilinear
                                             : hap::ResampleFilter::kBicubic;
}

hap::RgbImage ReadOrExit(const char* path) {
  auto img = hap::ReadImageFile(path, hap::ImageLimits{});
  if (!img.ok()) {
    std::fprintf(stderr, "%s\n", img.status().ToString().c_str());
    std::exit(2);
  }
  return std::move(img).value();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "decode" && argc == 4) {
    WriteImage(argv[3], ReadOrExit(argv[2]));
  } else if (cmd == "resize" && (argc == 6 || argc == 7)) {
    WriteImage(argv[5], hap::Resize(ReadOrExit(argv[2]), FilterArg(argc, argv, 6),
                                    std::atoi(argv[3]), std::atoi(argv[4])));
  } else if (cmd == "region" && argc == 10) {
    WriteImage(argv[9], hap::ResizeBicubicRegion(ReadOrExit(argv[2]), std::atoll(argv[3]),
                                                 std::atoll(argv[4]), std::atoll(argv[5]),
                                                 std::atoll(argv[6]), std::atoi(argv[7]),
                                                 std::atoi(argv[8])));
  } else if (cmd == "preprocess" && (argc == 5 || argc == 6)) {
    const int size = std::atoi(argv[3]);
    hap::ImageProcessorConfig config = hap::ClipImageProcessorConfig(size);
    config.resample = FilterArg(argc, argv, 5);
    auto x = hap::ClipPreprocess(ReadOrExit(argv[2]), config);
    if (!x.ok()) {
      std::fprintf(stderr, "%s\n", x.status().ToString().c_str());
      return 2;
    }
    WriteNpy(argv[4], "<f4", {3, static_cast<size_t>(size), static_cast<size_t>(size)}, x->data(),
             x->size() * sizeof(float));
  } else if (cmd == "qwen2vl" && argc == 5) {
    std::ifstream in(argv[3], std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    auto config = hap::ParseQwen2VLPreprocessorConfig(text.str(), argv[3]);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
      return 2;
    }
    auto x = hap::Qwen2VLPreprocess(ReadOrExit(argv[2]), *config);
    if (!x.ok()) {
      std::fprintf(stderr, "%s\n", x.status().ToString().c_str());
      return 2;
    }
    const size_t rows = static_cast<size_t>(x->grid.patches());
    WriteNpy(argv[4], "<f4", {rows, x->pixel_values.size() / rows}, x->pixel_values.data(),
             x->pixel_values.size() * sizeof(float));
    std::printf("grid %d %d %d resized %d %d\n", x->grid.t, x->grid.h, x->grid.w, x->resized.height,
                x->resized.width);
  } else if (cmd == "encode" && argc == 4) {
    const absl::Status s = hap::WritePng(argv[3], ReadOrExit(argv[2]));
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return 2;
    }
  } else {
    std::fprintf(stderr, "usage: image_tool decode|resize|region|preprocess|encode|qwen2vl ...\n");
    return 1;
  }
  return 0;
}
