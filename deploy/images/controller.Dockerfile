# moat-controller for linux/amd64 and linux/arm64 (see agent.Dockerfile for the build command;
# the context holds bin/ARCH/moat-controller). Offline: scripts/build-images.sh.
#
# Contents: Debian 12 minbase and the controller's shared libraries (SQLite among them). It runs
# as an unprivileged user (65532, the chart's securityContext) and writes only
# /var/lib/moat-controller (a volume).
FROM debian:bookworm-slim
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends libbrotli1 libcpp-httplib0.11 \
      libprometheus-cpp-core1.0 libssl3 zlib1g libsqlite3-0 ca-certificates \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man /usr/share/locale
COPY --from=bin ${TARGETARCH}/moat-controller /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/moat-controller"]
CMD ["--config", "/etc/moat/controller.yaml"]
