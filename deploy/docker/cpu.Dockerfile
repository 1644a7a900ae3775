# syntax=docker/dockerfile:1
# HAP serve, CPU image: hap-encoder, hap-prefill, hap-decode and hapctl on debian:bookworm-slim.
# From the repository root:
#   docker build -f deploy/docker/cpu.Dockerfile -t hap-serve:0.1.0-cpu .
# The build stage installs with `cmake --install` into /opt/hap (the layout tests/deploy checks);
# the runtime stage gets that prefix plus the packages of the libraries it links, nothing else.

FROM debian:bookworm-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
      libopenblas-dev nlohmann-json3-dev libsentencepiece-dev libjpeg-dev libpng-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DHAP_CUDA=OFF \
      -DHAP_BUILD_TESTS=OFF -DHAP_BUILD_BENCH=OFF \
 && cmake --build /build -j"$(nproc)" --target hapctl hap-encoder hap-prefill hap-decode \
 && cmake --install /build --prefix /opt/hap \
 && bash deploy/docker/runtime-packages.sh /opt/hap/bin > /opt/hap/share/hap/runtime-packages.txt

FROM debian:bookworm-slim
COPY --from=build /opt/hap /opt/hap
RUN apt-get update \
 && xargs -a /opt/hap/share/hap/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 hap \
 && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin hap
ENV PATH=/opt/hap/bin:$PATH
# The chart passes configuration as HAP_* variables and chooses the binary with `command`.
USER 10001:10001
WORKDIR /opt/hap
EXPOSE 50051 50052 50053 9464
CMD ["hapctl", "--help"]
