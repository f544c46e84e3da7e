// krteds-image: builds krteds' container image (an OCI image layout, FROM scratch) from a static
// binary without a container daemon, and checks an image. Kept out of krteds' own module so that
// its dependencies never change krteds' build.
module github.com/krteds/krteds/test/image

go 1.26.8

require github.com/google/go-containerregistry v0.21.6

require (
	github.com/google/go-cmp v0.7.0 // indirect
	github.com/klauspost/compress v1.18.6 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.20.0 // indirect
)
