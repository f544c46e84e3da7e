# krteds as an image: a static binary on an empty base, run as a non-root user; nothing is
# written at run time, so the root filesystem may be read-only.
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

FROM scratch
COPY --from=build /out/krteds /krteds
USER 65532:65532
EXPOSE 15010 15012 15014
ENTRYPOINT ["/krteds"]
CMD ["serve", "--xds-addr", ":15010"]
