# krteds as an image: a static binary on an empty base, run as a non-root user; nothing is
# written at run time but `serve --demo`'s examples, in /tmp, so the root filesystem may be
# read-only. test/image/build.sh (`make image`) builds the same image without Docker; its test
# holds this file to it (user, entrypoint, command, ports, labels, /etc/passwd, /etc/group, /tmp).
#   docker build --build-arg VERSION=v0.3.0 --build-arg COMMIT=$(git rev-parse HEAD) -t krteds .
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/krteds/krteds/outputs.Version=${VERSION} -X github.com/krteds/krteds/outputs.Commit=${COMMIT}" \
    -o /out/krteds ./cmd/krteds
# The nonroot user's entries, for tools that look the user up, and a /tmp anyone may write.
RUN mkdir -p /out/etc /out/tmp && chmod 1777 /out/tmp && \
    printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n' > /out/etc/passwd && \
    printf 'root:x:0:\nnonroot:x:65532:\n' > /out/etc/group

FROM scratch
ARG VERSION=dev
ARG COMMIT=unknown
LABEL org.opencontainers.image.title=krteds \
      org.opencontainers.image.source=https://github.com/krteds/krteds \
      org.opencontainers.image.version=${VERSION} \
      org.opencontainers.image.revision=${COMMIT}
COPY --from=build /out/ /
USER 65532:65532
EXPOSE 15010 15012 15014
ENTRYPOINT ["/krteds"]
CMD ["serve", "--xds-addr", ":15010"]
