# kiln-broker image (also holds the `kiln` CLI). Debian 12, built from source
# with Debian packages only (the build stage installs what deploy/install-deps.sh
# installs for building; the runtime stage only the shared libraries).
#
#   docker build -f deploy/docker/broker.Dockerfile -t kiln-broker .     # from the repository root
#   docker run --rm -p 127.0.0.1:8080:8080 -v $PWD/broker.yaml:/etc/kiln/broker.yaml:ro \
#     kiln-broker --config /etc/kiln/broker.yaml
#
# The broker needs no privilege: it runs as an unprivileged user (uid 10001)
# and only talks HTTP, ZeroMQ and Redis. Set broker.http.listen to 0.0.0.0:PORT
# and broker.workers.endpoint to tcp://0.0.0.0:PORT in its config so that
# other containers reach it.

FROM debian:12-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libzmq3-dev cppzmq-dev libhiredis-dev libmsgpack-cxx-dev libboost-dev libseccomp-dev \
      prometheus-cpp-dev libcpp-httplib-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev \
      libspdlog-dev libcli11-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads (tests, docs and deploy files are not needed).
COPY CMakeLists.txt ./
COPY common common
COPY broker broker
COPY worker worker
COPY cli cli
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF \
 && cmake --build /build --target kiln-broker kiln \
 && strip /build/bin/kiln-broker /build/bin/kiln

FROM debian:12-slim
# The shared libraries the two binaries link (ldd), and curl for health checks.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libzmq5 libhiredis0.14 libyaml-cpp0.7 libspdlog1.10 libfmt9 libssl3 \
      libprometheus-cpp-core1.0 libcpp-httplib0.11 ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin kiln
COPY --from=build /build/bin/kiln-broker /build/bin/kiln /usr/local/bin/
USER 10001:10001
# HTTP API + GET /metrics, and the ZeroMQ endpoint workers connect to.
EXPOSE 8080 5555
# SIGTERM: the broker stops taking requests and tells its workers it is leaving.
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/kiln-broker"]
CMD ["--config", "/etc/kiln/broker.yaml"]
