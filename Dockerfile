# runner's own image: the static `runner` binary on a Debian base with git (eval clones and
# diffs task repositories on the controller's side), bash and CA certificates. It drives the
# host's Docker engine through its socket; see "runner in a container" in the README.
#
# Offline, from a binary built on this machine (no registry: BASE defaults to the Debian
# base `runner image build` makes with mmdebstrap and `docker import`):
#
#   cargo build --release && cargo run --release -- image build
#   docker build -t runner .
#
# BINARY is a path in the build context (.dockerignore lets in only the two static builds):
#
#   docker build --build-arg BINARY=target/x86_64-unknown-linux-gnu/debug/runner -t runner .
#
# Where a registry answers: `--build-arg BASE=debian:bookworm-slim` (the packages below are
# then installed with apt), or Dockerfile.build, which compiles runner in a Rust image first.
ARG BASE=runner-base:bookworm
FROM ${BASE}
ARG BINARY=target/x86_64-unknown-linux-gnu/release/runner
# Installs only what the base lacks, so the offline base (which holds them all) needs no
# network here.
RUN set -eu; \
    missing=""; \
    for p in ca-certificates git bash; do \
      dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"; \
    done; \
    if [ -n "$missing" ]; then \
      apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing \
      && rm -rf /var/lib/apt/lists/*; \
    fi; \
    # Sandboxes are labelled with their owner's pid and machine (/etc/machine-id, else the
    # hostname): with no machine id every container of this image is a machine of its own
    # (its hostname), so a runner elsewhere never judges this one's pids, nor one this one's.
    rm -f /etc/machine-id
COPY ${BINARY} /usr/local/bin/runner
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 \
    RUNNER_IN_CONTAINER=1
LABEL runner.image=runner
ENTRYPOINT ["/usr/local/bin/runner"]
CMD ["--help"]
