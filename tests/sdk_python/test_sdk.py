#!/usr/bin/python3
"""The Python SDK (sdk/python, package hap_serve) against the real services: hap-encoder,
hap-decode and hap-prefill on loopback (port 0) with a tiny checkpoint from `hapctl make-tiny`,
checked against `hapctl run --json` in process.

ctest passes the paths in the environment (HAP_HAPCTL, HAP_BIN_DIR, HAP_SDK_PYTHONPATH,
HAP_TEST_WORKDIR); run by hand, they default to the source tree's build/:
    /usr/bin/python3 tests/sdk_python/test_sdk.py -v
"""

import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

SOURCE_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
BUILD_DIR = os.environ.get("HAP_BUILD_DIR") or os.path.join(SOURCE_DIR, "build")
HAPCTL = os.environ.get("HAP_HAPCTL") or os.path.join(BUILD_DIR, "tools", "hapctl", "hapctl")
BIN_DIR = os.environ.get("HAP_BIN_DIR") or os.path.join(BUILD_DIR, "bin")
SDK_PATH = os.environ.get("HAP_SDK_PYTHONPATH") or os.path.join(BUILD_DIR, "sdk", "python")
WORKDIR = os.environ.get("HAP_TEST_WORKDIR") or os.path.join(BUILD_DIR, "tests", "sdk_python",
                                                            "work")
IMAGE = os.path.join(SOURCE_DIR, "data", "scenes-test", "images", "test_0000.jpg")
EXAMPLE = os.path.join(SOURCE_DIR, "sdk", "python", "examples", "generate.py")
PROMPT = "What is in the picture?"

sys.path.insert(0, SDK_PATH)
import grpc  # noqa: E402
import hap_serve  # noqa: E402
from hap_serve import RetryPolicy, TlsOptions  # noqa: E402


def _die_with_parent():
    # The services get SIGTERM when this process dies (ctest kills it with SIGKILL on timeout).
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Service:
    """One service binary on 127.0.0.1; its stdout and stderr go to WORKDIR/<name>.log."""

    def __init__(self, binary, args, name, port=0):
        self.name = name
        self.log_path = os.path.join(WORKDIR, name + ".log")
        self._log = open(self.log_path, "a", buffering=1)
        argv = [os.path.join(BIN_DIR, binary), "--host", "127.0.0.1", "--port", str(port),
                "--pool-spin-us", "12"] + args
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     errors="replace", preexec_fn=_die_with_parent)
        self.address = None
        self._listening = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        # "<service> listening on <host>:<port>" (services/server/service_host.cc).
        for line in self.proc.stdout:
            self._log.write(line)
            if " listening on " in line and self.address is None:
                self.address = "127.0.0.1:" + line.strip().rsplit(":", 1)[1]
                self._listening.set()
        self._listening.set()

    def log_tail(self, n=20):
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def wait_listening(self, timeout=60):
        if not self._listening.wait(timeout) or self.address is None:
            raise RuntimeError(f"{self.name} did not start listening (exit code "
                               f"{self.proc.poll()}); its log:\n{self.log_tail()}")
        return self.address

    def stop(self, grace=30):
        """SIGTERM, then the exit code (SIGKILL after `grace` seconds)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._reader.join(5)
        self.proc.stdout.close()
        self._log.close()
        return code


def hapctl_run(model, method="none", retain=None, flops=None, max_new_tokens=12, temperature=0.0,
               top_p=1.0, top_k=0, seed=0, prompt=PROMPT):
    """`hapctl run --json` (tests/e2e/e2e_util.cc HapctlRun's invocation)."""
    argv = [HAPCTL, "run", "--json", "--model", model, "--image", IMAGE, "--prompt", prompt,
            "--method", method, "--max-new-tokens", str(max_new_tokens),
            "--temperature", repr(float(temperature)), "--top-p", repr(float(top_p)),
            "--top-k", str(top_k), "--seed", str(seed)]
    if retain is not None:
        argv += ["--retain", str(retain)]
    if flops is not None:
        argv += ["--flops", repr(float(flops))]
    p = subprocess.run(argv, capture_output=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError(f"hapctl run exited with {p.returncode}: {p.stderr.decode()}")
    return json.loads(p.stdout.decode("utf-8"))


class SdkTest(unittest.TestCase):
    services = []

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORKDIR, exist_ok=True)
        for name in os.listdir(WORKDIR):
            if name.endswith(".log"):
                os.remove(os.path.join(WORKDIR, name))
        cls.model = os.path.join(WORKDIR, "tiny8")
        shutil.rmtree(cls.model, ignore_errors=True)
        subprocess.run([HAPCTL, "make-tiny", "--out", cls.model, "--layers", "8", "--seed", "1"],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        with open(IMAGE, "rb") as f:
            cls.image = f.read()
        try:
            cls.encoder = cls.start("hap-encoder", ["--model", cls.model], "encoder")
            cls.decode = cls.start("hap-decode", ["--model", cls.model], "decode")
            cls.prefill = cls.start("hap-prefill", cls.prefill_args(), "prefill")
            cls.client = hap_serve.Client(cls.prefill.address)
            cls.decode_client = hap_serve.Client(cls.decode.address)
            for addr in (cls.encoder.address, cls.decode.address, cls.prefill.address):
                with hap_serve.Client(addr) as c:
                    c.wait_until_serving(timeout=60)
        except BaseException:
            cls.stop_all()
            raise
        cls._long_ask = None

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.decode_client.close()
        codes = cls.stop_all()
        bad = {name: code for name, code in codes.items() if code != 0}
        if bad:
            raise AssertionError(f"services did not exit cleanly: {bad} (logs in {WORKDIR})")

    @classmethod
    def start(cls, binary, args, name, port=0):
        s = Service(binary, args, name, port)
        cls.services.append(s)
        s.wait_listening()
        return s

    @classmethod
    def stop_all(cls):
        codes = {}
        for s in reversed(cls.services):  # prefill before its peers
            codes[s.name] = s.stop()
        cls.services = []
        return codes

    @classmethod
    def prefill_args(cls):
        return ["--model", cls.model, "--encoder-addr", cls.encoder.address,
                "--decode-addr", cls.decode.address]

    def all_idle_ms(self, timeout=1.0):
        """Milliseconds until prefill and decode hold no request and no KV cache, or None."""
        t0 = time.monotonic()
        while True:
            states = [c.get_state() for c in (self.client, self.decode_client)]
            if all(s.in_flight_requests == 0 and s.kv_caches_held == 0 and s.kv_bytes_held == 0
                   and s.kv_pool_blocks_in_use == 0 for s in states):
                return (time.monotonic() - t0) * 1000
            if time.monotonic() - t0 > timeout:
                return None
            time.sleep(0.01)

    def long_ask(self):
        """A sampled request (hap, retain 8) that runs for at least 500 tokens on this model,
        found on the server, and the seconds it took uncancelled."""
        if SdkTest._long_ask is None:
            for seed in range(1, 31):
                ask = dict(method="hap", retain=8, temperature=1.0, seed=seed,
                           max_new_tokens=1000)
                t0 = time.monotonic()
                r = self.client.generate(self.image, PROMPT, **ask)
                if len(r.token_ids) >= 500:
                    SdkTest._long_ask = (ask, time.monotonic() - t0)
                    break
            else:
                self.fail("no request of 500+ tokens found on this checkpoint")
        return SdkTest._long_ask

    def assert_same_as_run(self, result, deltas, run):
        want = run["token_ids"]
        self.assertEqual(list(result.token_ids), want)
        streamed = [i for d in deltas for i in d.token_ids]
        self.assertEqual(list(result.streamed_token_ids), streamed)
        if result.finish_reason == "eos":  # the EOS id is never streamed
            streamed.append(want[-1])
        self.assertEqual(streamed, want)
        self.assertEqual("".join(d.text for d in deltas), run["text"])
        self.assertEqual(result.text, run["text"])
        self.assertEqual(result.finish_reason, run["finish_reason"])
        s, p = result.stats, run["pruning"]
        self.assertEqual(s.method, p["method"])
        for key in ("prompt_tokens", "text_tokens", "visual_tokens", "image_visual_tokens",
                    "kv_bytes", "kv_bytes_unpruned"):
            self.assertEqual(getattr(s, key), p[key], key)
        self.assertEqual(list(s.layer_visual_tokens), p["layer_visual_tokens"])
        self.assertAlmostEqual(s.average_visual_tokens, p["average_visual_tokens"])
        self.assertEqual([(st.after_layer, st.tokens_before, st.tokens_kept) for st in s.stages],
                         [(st["after_layer"], st["visual_tokens_before"],
                           st["visual_tokens_kept"]) for st in p["stages"]])
        self.assertAlmostEqual(s.flops.full, p["flops_full"], delta=1e-6 * p["flops_full"])
        self.assertAlmostEqual(s.flops.unpruned_full, p["unpruned_flops_full"],
                               delta=1e-6 * p["unpruned_flops_full"])
        self.assertEqual(s.kv_bytes_received, s.kv_bytes)
        self.assertGreaterEqual(s.kv_chunks, len(s.layer_visual_tokens))
        self.assertEqual(result.attempts, 1)
        self.assertGreater(result.ttft_ms, 0)
        self.assertEqual(len(result.token_times_ms), len(result.streamed_token_ids))
        self.assertGreater(s.timings.total_ms, 0)

    def test_streams_what_hapctl_run_generates(self):
        asks = [
            dict(method="none"),
            dict(method="hap", retain=8),
            dict(method="hap", retain="75%"),
            dict(method="hap", flops=0.9),
            dict(method="hap", retain=8, temperature=0.7, seed=3, max_new_tokens=40),
        ]
        for i, ask in enumerate(asks):
            with self.subTest(**ask):
                run = hapctl_run(self.model, **{"max_new_tokens": 12, **ask})
                stream = self.client.stream(self.image, PROMPT, request_id=f"sdk-{i}",
                                            **{"max_new_tokens": 12, **ask})
                deltas = list(stream)
                result = stream.result()
                self.assertTrue(stream.done())
                self.assert_same_as_run(result, deltas, run)
                self.assertEqual(result.stats.request_id, f"sdk-{i}")
                # generate() is the same call without the deltas.
                again = self.client.generate(self.image, PROMPT, metadata={"x-test": "sdk"},
                                             **{"max_new_tokens": 12, **ask})
                self.assertEqual(again.token_ids, result.token_ids)
                self.assertEqual(again.text, result.text)

        # The stats name the method and the tokens kept.
        hap = self.client.generate(self.image, PROMPT, method="hap", retain=8, max_new_tokens=4)
        s = hap.stats
        self.assertEqual((s.method, s.budget), ("hap", "retain 8"))
        self.assertAlmostEqual(s.average_visual_tokens, 8.0)
        self.assertTrue(s.stages)
        self.assertTrue(all(st.tokens_kept < st.tokens_before for st in s.stages))
        self.assertLess(s.layer_visual_tokens[-1], s.image_visual_tokens)
        self.assertLess(s.kv_bytes, s.kv_bytes_unpruned)
        self.assertLess(s.flops.fraction, 1.0)
        none = self.client.generate(self.image, PROMPT, method="none", max_new_tokens=4).stats
        self.assertEqual((none.method, none.stages), ("none", ()))
        self.assertEqual(set(none.layer_visual_tokens), {none.image_visual_tokens})
        self.assertEqual(none.kv_bytes, none.kv_bytes_unpruned)

    def test_deadline_gives_deadline_exceeded(self):
        ask, _ = self.long_ask()
        t0 = time.monotonic()
        with self.assertRaises(hap_serve.DeadlineExceededError) as cm:
            self.client.generate(self.image, PROMPT, timeout=0.005, **ask)
        elapsed = time.monotonic() - t0
        e = cm.exception
        self.assertIsInstance(e, hap_serve.HapError)
        self.assertEqual(e.code, grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertTrue(e.details)
        self.assertIn(e.details, str(e))
        self.assertLess(elapsed, 1.0, "the call must end at its deadline")
        self.assertIsNotNone(self.all_idle_ms(2.0), "the request outlived its deadline")
        self.assertEqual(self.client.generate(self.image, PROMPT, max_new_tokens=2).attempts, 1)

    def test_cancel_mid_stream(self):
        ask, full_s = self.long_ask()
        stream = self.client.stream(self.image, PROMPT, **ask)
        n = 0
        with self.assertRaises(hap_serve.CancelledError) as cm:
            for _ in stream:
                n += 1
                if n == 3:
                    self.assertTrue(stream.cancel())
        self.assertEqual(n, 3)
        self.assertEqual(cm.exception.code, grpc.StatusCode.CANCELLED)
        with self.assertRaises(hap_serve.CancelledError):
            stream.result()
        self.assertFalse(stream.cancel(), "an ended stream has nothing to cancel")
        idle_ms = self.all_idle_ms(1.0)
        self.assertIsNotNone(idle_ms, "prefill or decode still holds the request 1 s after the "
                                      "cancel")
        self.assertLess(idle_ms, 1000 * full_s, "the server generated on after the cancel")

        # From another thread, while the caller reads.
        stream = self.client.stream(self.image, PROMPT, **ask)
        timer = threading.Timer(0.05, stream.cancel)
        timer.start()
        got = []
        with self.assertRaises(hap_serve.CancelledError):
            for d in stream:
                got.append(d)
        timer.join()
        self.assertLess(len(got), ask["max_new_tokens"])
        self.assertIsNotNone(self.all_idle_ms(1.0))

        # Leaving a `with` block early cancels the call too.
        with self.client.stream(self.image, PROMPT, **ask) as stream:
            next(stream)
        self.assertIsNotNone(self.all_idle_ms(1.0))

        # The server keeps serving.
        run = hapctl_run(self.model, method="hap", retain=8)
        stream = self.client.stream(self.image, PROMPT, method="hap", retain=8,
                                    max_new_tokens=12)
        deltas = list(stream)
        self.assert_same_as_run(stream.result(), deltas, run)

    def test_bad_request_gives_invalid_argument(self):
        cases = [
            (dict(prompt=""), "prompt is empty"),
            (dict(method="magic"), "unknown pruning method 'magic'"),
            (dict(method="hap", retain="lots"), "lots"),
            (dict(image=b"GIF89a not really an image at all"), "encoder"),
        ]
        for kwargs, message in cases:
            with self.subTest(message=message):
                image = kwargs.pop("image", self.image)
                prompt = kwargs.pop("prompt", PROMPT)
                with self.assertRaises(hap_serve.InvalidArgumentError) as cm:
                    self.client.generate(image, prompt, **kwargs)
                e = cm.exception
                self.assertEqual(e.code, grpc.StatusCode.INVALID_ARGUMENT)
                self.assertIn(message, e.details)
                self.assertIn(message, str(e))
                self.assertEqual(e.attempts, 1, "INVALID_ARGUMENT is not retried")
        # Caught before sending.
        with self.assertRaises(ValueError):
            self.client.generate(self.image, PROMPT, retain=8, flops=0.5)
        with self.assertRaises(TypeError):
            self.client.generate(IMAGE, PROMPT)
        with self.assertRaisesRegex(ValueError, "prompt"):
            self.client.generate(self.image, "\udc80")
        # And the server keeps serving.
        self.assertEqual(self.client.generate(self.image, PROMPT, max_new_tokens=2).attempts, 1)

    def test_unreachable_address_gives_unavailable_after_retries(self):
        address = f"127.0.0.1:{free_port()}"
        retry = RetryPolicy(max_attempts=3, initial_backoff_ms=50, multiplier=2.0)
        with hap_serve.Client(address, retry=retry) as c:
            t0 = time.monotonic()
            with self.assertRaises(hap_serve.UnavailableError) as cm:
                c.generate(self.image, PROMPT)
            elapsed = time.monotonic() - t0
            e = cm.exception
            self.assertEqual(e.code, grpc.StatusCode.UNAVAILABLE)
            self.assertEqual(e.attempts, 3)
            self.assertIn(address, str(e))
            self.assertGreaterEqual(elapsed, 0.15 * 0.9, "backoff of 50 + 100 ms between tries")
            with self.assertRaises(hap_serve.UnavailableError):
                c.health(timeout=1.0)
        # Retries stop at the deadline.
        retry = RetryPolicy(max_attempts=50, initial_backoff_ms=200, multiplier=1.0)
        with hap_serve.Client(address, retry=retry) as c:
            t0 = time.monotonic()
            with self.assertRaises(hap_serve.HapError) as cm:
                c.generate(self.image, PROMPT, timeout=0.5)
            self.assertLess(time.monotonic() - t0, 1.5)
            self.assertLess(cm.exception.attempts, 50)

    def start_late(self, work, port):
        """Runs work() in a thread, starts hap-prefill on `port` 0.4 s later, and returns what
        work() returned (or raised) and the prefill's exit code. The prefill is started from
        this thread: PR_SET_PDEATHSIG fires when the forking *thread* ends."""
        outcome = {}

        def run():
            try:
                outcome["value"] = work()
            except hap_serve.HapError as e:
                outcome["error"] = e

        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(0.4)
        late = Service("hap-prefill", self.prefill_args(), f"prefill-late-{port}", port)
        worker.join(60)
        code = late.stop()
        self.assertEqual(code, 0, late.log_tail())
        self.assertNotIn("error", outcome)
        return outcome["value"]

    def test_retries_until_the_front_door_comes_up(self):
        # One client per phase and port: gRPC shares connections between channels to one
        # target, and one client's polling would reconnect the other's.
        run = hapctl_run(self.model, method="hap", retain=8)
        retry = RetryPolicy(max_attempts=30, initial_backoff_ms=50, multiplier=1.5,
                            max_backoff_ms=300)
        port = free_port()

        def generate():
            with hap_serve.Client(f"127.0.0.1:{port}", retry=retry) as c:
                stream = c.stream(self.image, PROMPT, method="hap", retain=8,
                                  max_new_tokens=12, timeout=60)
                return list(stream), stream.result()

        deltas, result = self.start_late(generate, port)
        self.assertGreater(result.attempts, 1)
        self.assertEqual(list(result.token_ids), run["token_ids"])
        self.assertEqual("".join(d.text for d in deltas), run["text"])

        port = free_port()

        def wait():
            with hap_serve.Client(f"127.0.0.1:{port}") as c:
                t0 = time.monotonic()
                c.wait_until_serving(timeout=30)
                return time.monotonic() - t0

        # ~1 s: the server is up 0.4 s in; a client that stops reconnecting takes 8 s or more.
        self.assertLess(self.start_late(wait, port), 4.0, "wait_until_serving noticed late")

    def test_not_the_front_door(self):
        for service, name in ((self.encoder, "hap-encoder"), (self.decode, "hap-decode")):
            with self.subTest(service=name), hap_serve.Client(service.address) as c:
                with self.assertRaises(hap_serve.NotFrontDoorError) as cm:
                    c.generate(self.image, PROMPT)
                e = cm.exception
                self.assertEqual(e.code, grpc.StatusCode.UNIMPLEMENTED)
                self.assertIn(service.address, str(e))
                self.assertIn(name, str(e))
                self.assertIn("not a hap-prefill front door", str(e))

    def test_health_and_state(self):
        self.assertTrue(self.client.health())
        state = self.client.get_state()
        self.assertEqual(state.service, "hap-prefill")
        self.assertTrue(state.serving)
        self.assertFalse(state.draining)
        decode = self.decode_client.get_state()
        self.assertEqual(decode.service, "hap-decode")
        self.assertGreater(decode.kv_pool_blocks_total, 0)
        before = state.requests_total
        self.client.generate(self.image, PROMPT, max_new_tokens=2)
        self.assertGreater(self.client.get_state().requests_total, before)

    def test_mutual_tls(self):
        cert_dir = os.path.join(WORKDIR, "tls")
        os.makedirs(cert_dir, exist_ok=True)
        cert, key = os.path.join(cert_dir, "cert.pem"), os.path.join(cert_dir, "key.pem")
        made = subprocess.run(
            ["/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
             "-out", cert, "-days", "1", "-subj", "/CN=localhost",
             "-addext", "subjectAltName=DNS:localhost"], capture_output=True)
        if made.returncode != 0:
            self.skipTest("openssl could not make a test certificate")
        tls_prefill = Service("hap-prefill", self.prefill_args() + [
            "--tls-cert", cert, "--tls-key", key, "--tls-client-ca", cert], "prefill-tls")
        try:
            address = tls_prefill.wait_listening()
            tls = TlsOptions(root_certs_file=cert, client_cert_file=cert, client_key_file=key,
                             server_name="localhost")
            run = hapctl_run(self.model, method="hap", retain=8)
            with hap_serve.Client(address, tls=tls) as c:
                c.wait_until_serving(timeout=30)
                result = c.generate(self.image, PROMPT, method="hap", retain=8,
                                    max_new_tokens=12)
                self.assertEqual(list(result.token_ids), run["token_ids"])
                self.assertEqual(result.text, run["text"])
            once = RetryPolicy(max_attempts=1)
            no_client_cert = TlsOptions(root_certs_file=cert, server_name="localhost")
            for name, opts in (("plaintext", None), ("no client certificate", no_client_cert)):
                with self.subTest(name), hap_serve.Client(address, tls=opts, retry=once) as c:
                    with self.assertRaises(hap_serve.HapError):
                        c.generate(self.image, PROMPT, max_new_tokens=2, timeout=10)
        finally:
            self.assertEqual(tls_prefill.stop(), 0, tls_prefill.log_tail())
        with self.assertRaisesRegex(ValueError, "client_key_file"):
            hap_serve.Client(address, tls=TlsOptions(client_cert_file=cert))
        missing = os.path.join(cert_dir, "missing.pem")
        with self.assertRaises(FileNotFoundError) as cm:
            hap_serve.Client(address, tls=TlsOptions(root_certs_file=missing))
        self.assertIn(missing, str(cm.exception))

    def test_bearer_token(self):
        """A front door with --auth-tokens-file: Client(token=...) is served, no token and a
        wrong one get UnauthenticatedError with the same message; health stays open."""
        token = "sdk-test-token-0123456789abcdef"
        path = os.path.join(WORKDIR, "tokens")
        with open(path, "w") as f:
            f.write(f"# client-id:token\npython-sdk:{token}\n")
        auth_prefill = Service("hap-prefill", self.prefill_args() + ["--auth-tokens-file", path],
                               "prefill-auth")
        try:
            address = auth_prefill.wait_listening()
            with hap_serve.Client(address) as anonymous:
                anonymous.wait_until_serving(timeout=30)  # health needs no token
                messages = set()
                for name, tok in (("no token", None), ("wrong token", "x" * 32)):
                    with self.subTest(name), hap_serve.Client(address, token=tok) as c:
                        with self.assertRaises(hap_serve.UnauthenticatedError) as cm:
                            c.generate(self.image, PROMPT, max_new_tokens=2)
                        self.assertEqual(cm.exception.code, grpc.StatusCode.UNAUTHENTICATED)
                        self.assertEqual(cm.exception.attempts, 1, "not retried")
                        messages.add(cm.exception.details)
                        with self.assertRaises(hap_serve.UnauthenticatedError):
                            c.get_state()
                self.assertEqual(len(messages), 1, messages)
            with hap_serve.Client(address, token=token) as c:
                result = c.generate(self.image, PROMPT, method="hap", retain=8, max_new_tokens=4)
                self.assertEqual(result.attempts, 1)
                self.assertEqual(c.get_state().service, "hap-prefill")
        finally:
            self.assertEqual(auth_prefill.stop(), 0, auth_prefill.log_tail())
        self.assertNotIn(token, auth_prefill.log_tail(200), "the token was logged")
        with self.assertRaisesRegex(ValueError, "printable ASCII"):
            hap_serve.Client(address, token="two words")

    def test_example_script(self):
        run = hapctl_run(self.model, method="hap", retain=8)
        env = dict(os.environ, PYTHONPATH=SDK_PATH, PYTHONIOENCODING="utf-8")
        p = subprocess.run(
            [sys.executable, EXAMPLE, "--address", self.prefill.address, "--image", IMAGE,
             "--prompt", PROMPT, "--method", "hap", "--retain", "8", "--max-new-tokens", "12",
             "--stream"], capture_output=True, env=env, timeout=60)
        out = p.stdout.decode("utf-8")
        self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
        self.assertTrue(out.startswith(run["text"] + "\n"), out)
        self.assertIn("-- pruning: hap (retain 8)", out)
        self.assertIn(str(run["pruning"]["layer_visual_tokens"]), out)
        bad = subprocess.run(
            [sys.executable, EXAMPLE, "--address", self.prefill.address, "--image", IMAGE,
             "--prompt", PROMPT, "--method", "magic"], capture_output=True, env=env, timeout=60)
        self.assertEqual(bad.returncode, 1)
        self.assertIn("unknown pruning method 'magic'", bad.stderr.decode())


class QwenSdkTest(unittest.TestCase):
    """The same SDK calls against the services on a tiny Qwen2.5-VL checkpoint: the image at its
    own resolution (its visual tokens follow its size), budgets as percentages of them."""
    services = []
    start = SdkTest.__dict__["start"]  # the classmethods, bound to this class
    stop_all = SdkTest.__dict__["stop_all"]
    assert_same_as_run = SdkTest.assert_same_as_run

    @classmethod
    def setUpClass(cls):
        os.makedirs(WORKDIR, exist_ok=True)
        cls.model = os.path.join(WORKDIR, "qwen-tiny8")
        shutil.rmtree(cls.model, ignore_errors=True)
        subprocess.run([HAPCTL, "make-tiny", "--family", "qwen2.5-vl", "--out", cls.model,
                        "--layers", "8", "--seed", "2"],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)
        with open(IMAGE, "rb") as f:
            cls.image = f.read()
        try:
            encoder = cls.start("hap-encoder", ["--model", cls.model], "qwen-encoder")
            decode = cls.start("hap-decode", ["--model", cls.model], "qwen-decode")
            prefill = cls.start("hap-prefill", ["--model", cls.model, "--encoder-addr",
                                                encoder.address, "--decode-addr", decode.address],
                                "qwen-prefill")
            cls.client = hap_serve.Client(prefill.address)
            cls.client.wait_until_serving(timeout=60)
        except BaseException:
            cls.stop_all()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        codes = cls.stop_all()
        bad = {name: code for name, code in codes.items() if code != 0}
        if bad:
            raise AssertionError(f"services did not exit cleanly: {bad} (logs in {WORKDIR})")

    def test_streams_what_hapctl_run_generates(self):
        for ask in (dict(method="none"), dict(method="hap", retain="50%"),
                    dict(method="divprune", retain="25%")):
            with self.subTest(**ask):
                run = hapctl_run(self.model, **ask)
                stream = self.client.stream(self.image, PROMPT, max_new_tokens=12, **ask)
                deltas = list(stream)
                self.assert_same_as_run(stream.result(), deltas, run)
        # The photograph (168 x 168) gives 36 visual tokens on this model; half is 18.
        s = self.client.generate(self.image, PROMPT, method="hap", retain="50%",
                                 max_new_tokens=4).stats
        self.assertEqual(s.image_visual_tokens, 36)
        self.assertAlmostEqual(s.average_visual_tokens, 18, delta=1.0)

    def test_visionzip_is_refused_with_the_reason(self):
        with self.assertRaises(hap_serve.InvalidArgumentError) as e:
            self.client.generate(self.image, PROMPT, method="visionzip", retain=8)
        self.assertIn("CLS token", str(e.exception))


if __name__ == "__main__":
    unittest.main()
