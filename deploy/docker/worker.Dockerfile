# kiln-worker image: the worker and the interpreters it offers (python3,
# node, bash). Debian 12, built from source with Debian packages only.
#
#   docker build -f deploy/docker/worker.Dockerfile -t kiln-worker .     # from the repository root
#   docker run -d --privileged --cgroupns=private --stop-timeout 90 \
#     -v $PWD/worker.yaml:/etc/kiln/worker.yaml:ro kiln-worker --config /etc/kiln/worker.yaml
#
# WHY IT IS PRIVILEGED. The worker is a sandbox builder (docs/security.md,
# "What the worker needs"). For every job it, as root:
#   - clones the job into new pid, mount, network, ipc, uts and cgroup
#     namespaces and mounts a fresh tmpfs root, read-only binds, /proc and
#     tmpfs workspaces                         -> CAP_SYS_ADMIN, mount(2) allowed
#   - brings up loopback in the job's network namespace -> CAP_NET_ADMIN
#   - runs the job as its own uid/gid from worker's uid range
#                                              -> CAP_SETUID, CAP_SETGID
#   - empties the job's capability sets and locks securebits -> CAP_SETPCAP
#   - creates a cgroup per job (memory, pids, cpu limits) under its
#     cgroup_prefix                            -> a writable cgroup hierarchy
#   - installs a seccomp filter and a Landlock ruleset in the job
#                                              -> seccomp(2), landlock_*(2) not blocked
#   - kills jobs, manages workspaces           -> CAP_KILL, CAP_DAC_OVERRIDE,
#                                                 CAP_CHOWN, CAP_FOWNER (CAP_MKNOD optional)
# Docker's defaults forbid most of that: its seccomp profile blocks mount,
# unshare, pivot_root and clone with namespace flags; AppArmor's docker-default
# denies mount; /sys/fs/cgroup is read-only; and /proc has masked paths, which
# makes the kernel refuse a fresh procfs in a new pid namespace.
#
# So run it with --privileged (simplest, and what deploy/compose does), or
# with exactly:
#   --cap-add SYS_ADMIN --cap-add NET_ADMIN --cap-add SETUID --cap-add SETGID --cap-add SETPCAP \
#   --cap-add KILL --cap-add MKNOD --cap-add DAC_OVERRIDE --cap-add CHOWN --cap-add FOWNER \
#   --security-opt seccomp=unconfined --security-opt apparmor=unconfined \
#   --security-opt systempaths=unconfined \
#   plus a writable cgroup2 mount at /sys/fs/cgroup (with --cgroupns=private,
#   e.g. -v /sys/fs/cgroup/<delegated subtree>:/sys/fs/cgroup:rw).
# Either way the jobs themselves get none of it: each job drops every
# capability, runs under seccomp + Landlock + no_new_privs as an unprivileged
# uid. Do not use a user-namespaced (rootless/userns-remap) Docker: the worker
# needs real root for the uid range and cgroups. Only one worker per host
# (or distinct worker.id and uid ranges), as the uid range is host-wide.
#
# Stop with SIGTERM and a timeout above worker.drain_timeout_ms (docker stop -t 90):
# the worker drains (no new jobs, running ones finish) and then exits.

FROM debian:12-slim AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake ninja-build pkg-config ca-certificates \
      libzmq3-dev cppzmq-dev libhiredis-dev libmsgpack-cxx-dev libboost-dev libseccomp-dev \
      prometheus-cpp-dev libcpp-httplib-dev libssl-dev nlohmann-json3-dev libyaml-cpp-dev \
      libspdlog-dev libcli11-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY CMakeLists.txt ./
COPY common common
COPY broker broker
COPY worker worker
COPY cli cli
RUN cmake -S . -B /build -G Ninja -DCMAKE_BUILD_TYPE=Release -DKILN_BUILD_TESTS=OFF \
 && cmake --build /build --target kiln-worker kiln-init kiln-gvisor-compat kiln-zygote \
 && strip /build/bin/kiln-worker /build/bin/kiln-init /build/bin/libkiln-gvisor-compat.so \
      /build/bin/libkiln-zygote.so

# The javascript package set (docs/runtimes.md, "Package sets"), pinned by
# its lock file; no install script runs. Only the tree goes into the image.
FROM debian:12-slim AS js-packages
RUN apt-get update \
 && apt-get install -y --no-install-recommends nodejs npm ca-certificates \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /usr/local/lib/kiln/javascript
COPY deploy/runtimes/javascript/package.json deploy/runtimes/javascript/package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts --no-audit --no-fund && chmod -R u=rwX,go=rX .

FROM debian:12-slim
# The worker's shared libraries (ldd) and the interpreters at the paths of
# worker.interpreters (/usr/bin/python3, /usr/bin/node, /bin/bash); runsc
# for workers configured with sandbox.isolation: gvisor; pip and npm, the
# installers of packages on request (packages.install).
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      libzmq5 libyaml-cpp0.7 libspdlog1.10 libfmt9 libseccomp2 \
      libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0 libcivetweb1 \
      python3 python3-pip nodejs npm ca-certificates runsc \
 && rm -rf /var/lib/apt/lists/*
# The python package set the sandboxes see (deploy/runtimes/python-packages.txt).
COPY deploy/runtimes/python-packages.txt /tmp/python-packages.txt
RUN apt-get update \
 && apt-get install -y --no-install-recommends $(sed 's/#.*//' /tmp/python-packages.txt) \
 && rm -rf /var/lib/apt/lists/* /tmp/python-packages.txt
COPY --from=js-packages /usr/local/lib/kiln/javascript /usr/local/lib/kiln/javascript
COPY --from=build /build/bin/kiln-worker /build/bin/kiln-init /build/bin/libkiln-gvisor-compat.so \
     /build/bin/libkiln-zygote.so /usr/local/bin/
COPY deploy/docker/worker-entrypoint.sh /usr/local/bin/kiln-worker-entrypoint
# Root, on purpose: see above. Workspaces live under /run/kiln/<worker id>.
USER 0:0
# worker.metrics_listen (Prometheus); the worker opens no other port (it connects to the brokers).
EXPOSE 9102
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/kiln-worker-entrypoint"]
CMD ["--config", "/etc/kiln/worker.yaml"]
