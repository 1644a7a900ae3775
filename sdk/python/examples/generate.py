#!/usr/bin/python3
"""Asks HAP serve's front door one question about an image, prints the answer (as it streams
with --stream) and then the pruning stats.

    PYTHONPATH=build/sdk/python /usr/bin/python3 sdk/python/examples/generate.py \\
        --address 127.0.0.1:50051 --image data/scenes-test/images/test_0000.jpg \\
        --prompt "What is in the picture?" --method hap --retain 64 --stream
"""

import argparse
import os
import sys

import hap_serve


def print_stats(result):
    s = result.stats
    print(f"-- finish: {result.finish_reason} | {len(result.token_ids)} tokens | "
          f"attempts {result.attempts} | TTFT {result.ttft_ms:.1f} ms (client), "
          f"{s.timings.ttft_ms:.1f} ms (server) | total {s.timings.total_ms:.1f} ms")
    budget = f" ({s.budget})" if s.budget else ""
    print(f"-- pruning: {s.method}{budget} | visual tokens per layer "
          f"{s.average_visual_tokens:.1f} of {s.image_visual_tokens} | prompt {s.prompt_tokens} "
          f"tokens ({s.text_tokens} text)")
    print(f"-- layers: {list(s.layer_visual_tokens)}")
    for st in s.stages:
        print(f"-- stage: after layer {st.after_layer}: {st.tokens_before} -> {st.tokens_kept}")
    print(f"-- FLOPs {s.flops.full:.3g} of {s.flops.unpruned_full:.3g} "
          f"({100 * s.flops.fraction:.1f}%) | KV {s.kv_bytes / 1048576:.2f} MiB of "
          f"{s.kv_bytes_unpruned / 1048576:.2f} MiB | prefill {s.timings.prefill_ms:.1f} ms "
          f"(select {s.timings.score_select_ms:.2f} ms) | decode {s.timings.decode_ms:.1f} ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--address", default=os.environ.get("HAP_ADDRESS"),
                    help="hap-prefill's host:port (default: $HAP_ADDRESS)")
    ap.add_argument("--image", required=True, help="a JPEG or PNG file")
    ap.add_argument("--prompt", required=True)
    ap.add_argument("--method", help="pruning method (default: the server's)")
    budget = ap.add_mutually_exclusive_group()
    budget.add_argument("--retain", help="average visual tokens per layer: 64, or 11.1%%")
    budget.add_argument("--flops", type=float, help="fraction of the unpruned prefill FLOPs")
    ap.add_argument("--max-new-tokens", type=int, default=0, help="0 = the server's 64")
    ap.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, help="seconds for the whole call")
    ap.add_argument("--stream", action="store_true", help="print the answer as it is generated")
    ap.add_argument("--tls-ca", help="PEM roots: connect with TLS")
    ap.add_argument("--tls-cert", help="PEM client certificate (mutual TLS, with --tls-key)")
    ap.add_argument("--tls-key")
    ap.add_argument("--tls-server-name", help="the name in the server's certificate")
    a = ap.parse_args()
    if not a.address:
        ap.error("give --address (or set HAP_ADDRESS)")
    tls = None
    if a.tls_ca or a.tls_cert:
        tls = hap_serve.TlsOptions(root_certs_file=a.tls_ca or "",
                                   client_cert_file=a.tls_cert or "",
                                   client_key_file=a.tls_key or "",
                                   server_name=a.tls_server_name or "")
    with open(a.image, "rb") as f:
        image = f.read()

    with hap_serve.Client(a.address, tls=tls) as client:
        stream = client.stream(image, a.prompt, method=a.method, retain=a.retain, flops=a.flops,
                               max_new_tokens=a.max_new_tokens, temperature=a.temperature,
                               seed=a.seed, timeout=a.timeout)
        try:
            for delta in stream:
                if a.stream:
                    print(delta.text, end="", flush=True)
            result = stream.result()
        except hap_serve.HapError as e:
            if a.stream:
                print()
            print(f"generate: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            stream.cancel()
            print("\ngenerate: cancelled", file=sys.stderr)
            return 130
    print(result.text if not a.stream else "")
    print_stats(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
