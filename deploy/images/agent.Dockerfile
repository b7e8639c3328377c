# moat-agent for linux/amd64 and linux/arm64, for builders with a registry at hand:
#   docker buildx build --platform linux/amd64,linux/arm64 -f deploy/images/agent.Dockerfile \
#     -t REGISTRY/moat/moat-agent:TAG --build-context bin=build/images/bin .
# where build/images/bin/amd64 and build/images/bin/arm64 hold the three binaries of each
# architecture (scripts/build-images.sh lays them out). Offline, without any registry,
# scripts/build-images.sh builds the same image from a debootstrap root with buildah.
#
# Contents: Debian 12 minbase, the agent's shared libraries, curl (the pod's health probes) and
# python3 (sandboxes of a profile without a root of its own see this image's root, read-only).
# moat-init and moat-probe are static; the agent starts them from its own directory.
FROM debian:bookworm-slim
ARG TARGETARCH
RUN apt-get update \
 && apt-get install -y --no-install-recommends libbrotli1 libcpp-httplib0.11 \
      libprometheus-cpp-core1.0 libssl3 zlib1g ca-certificates curl python3 \
 && rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man /usr/share/locale
COPY --from=bin ${TARGETARCH}/moat-agent ${TARGETARCH}/moat-init ${TARGETARCH}/moat-probe /usr/local/bin/
ENTRYPOINT ["/usr/local/bin/moat-agent"]
CMD ["--config", "/etc/moat/agent.yaml"]
