# syntax=docker/dockerfile:1
# HAP serve, CUDA image: the same binaries built with HAP_CUDA=ON on the nvidia/cuda images
# (Ubuntu 24.04 carries the same gRPC 1.51 / protobuf 3.21 / Abseil 20220623 as Debian 12).
# From the repository root:
#   docker build -f deploy/docker/cuda.Dockerfile -t hap-serve:0.1.0-cuda .
# Runs on GPU nodes through the NVIDIA container runtime with the CUDA backend (HAP_DEVICE=cuda);
# without a GPU the services refuse to start on it: set HAP_DEVICE=cpu to run the CPU backend.

FROM nvidia/cuda:13.0.0-devel-ubuntu24.04 AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
      libopenblas-dev nlohmann-json3-dev libsentencepiece-dev libjpeg-dev libpng-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cmake -S . -B /build -DCMAKE_BUILD_TYPE=Release -DHAP_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      -DHAP_BUILD_TESTS=OFF -DHAP_BUILD_BENCH=OFF \
 && cmake --build /build -j"$(nproc)" --target hapctl hap-encoder hap-prefill hap-decode \
 && cmake --install /build --prefix /opt/hap \
 && bash deploy/docker/runtime-packages.sh /opt/hap/bin > /opt/hap/share/hap/runtime-packages.txt

FROM nvidia/cuda:13.0.0-runtime-ubuntu24.04
COPY --from=build /opt/hap /opt/hap
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive xargs -a /opt/hap/share/hap/runtime-packages.txt \
      apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 hap \
 && useradd --uid 10001 --gid 10001 --no-create-home --shell /usr/sbin/nologin hap
ENV PATH=/opt/hap/bin:$PATH \
    HAP_DEVICE=cuda \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 10001:10001
WORKDIR /opt/hap
EXPOSE 50051 50052 50053 9464
CMD ["hapctl", "--help"]
