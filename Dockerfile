# syntax=docker/dockerfile:1
#
# Images of rflux's three controllers. One build stage compiles the binaries statically
# (glibc with crt-static, the same command as `make static`); each controller then gets its own
# minimal image:
#
#   docker build --target kustomize-controller -t ghcr.io/rflux/rflux-kustomize-controller:v0.1.0 .
#   docker build --target source-controller    -t ghcr.io/rflux/rflux-source-controller:v0.1.0 .
#   docker build --target resourceset-controller -t ghcr.io/rflux/rflux-resourceset-controller:v0.1.0 .
#
# All run as the unprivileged user 65534 (nobody) and work with a read-only root filesystem
# (the install manifests mount emptyDirs at /tmp and, for source-controller, /data).
# docs/install.md explains the choices (why glibc, why source-controller carries ssh).

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM docker.io/library/rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends file \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
# The target directory is a cache mount, so the binaries are copied out in the same step.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    set -eux; \
    triple="$(uname -m)-unknown-linux-gnu"; \
    RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked \
      --target "$triple" -p source-controller -p kustomize-controller -p resourceset-controller; \
    scripts/check-static.sh "target/$triple/release/source-controller" "target/$triple/release/kustomize-controller" "target/$triple/release/resourceset-controller"; \
    mkdir -p /out; \
    cp "target/$triple/release/source-controller" "target/$triple/release/kustomize-controller" "target/$triple/release/resourceset-controller" /out/

# kustomize-controller needs nothing beyond CA certificates: distroless "static" has them,
# plus /etc/passwd, /etc/nsswitch.conf and tzdata.
FROM gcr.io/distroless/static-debian12:nonroot AS kustomize-controller
LABEL org.opencontainers.image.title="rflux-kustomize-controller" \
      org.opencontainers.image.description="Flux-compatible kustomize-controller written in Rust" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/kustomize-controller /usr/local/bin/kustomize-controller
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/kustomize-controller"]

# resourceset-controller (Flux Operator's ResourceSet API) needs CA certificates only, like
# kustomize-controller.
FROM gcr.io/distroless/static-debian12:nonroot AS resourceset-controller
LABEL org.opencontainers.image.title="rflux-resourceset-controller" \
      org.opencontainers.image.description="Flux Operator compatible ResourceSet controller written in Rust" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/resourceset-controller /usr/local/bin/resourceset-controller
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/resourceset-controller"]

# source-controller runs the OpenSSH client for ssh:// Git URLs (and /bin/sh for the key
# passphrase helper), so its base is a slim Debian with openssh-client and CA certificates.
FROM docker.io/library/debian:${DEBIAN_RELEASE}-slim AS source-controller
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssh-client ca-certificates \
 && rm -rf /var/lib/apt/lists/*
LABEL org.opencontainers.image.title="rflux-source-controller" \
      org.opencontainers.image.description="Flux-compatible source-controller (GitRepository) written in Rust" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /out/source-controller /usr/local/bin/source-controller
# ssh looks for ~/.ssh; nobody's home does not exist, /tmp is a writable emptyDir in the Pod.
ENV HOME=/tmp
USER 65534:65534
ENTRYPOINT ["/usr/local/bin/source-controller"]
