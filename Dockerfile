# The runner's own image: the controller plus the static server binary it mounts into
# sandbox containers. Build with `docker build -t runner .` where a registry is reachable
# (this project's CI machine has none; sandbox images are built offline, see images/).
FROM rust:1.90-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked && strip target/release/runner

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates git bash \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/runner /usr/local/bin/runner
ENTRYPOINT ["runner"]
