# syntax=docker/dockerfile:1
# sluice gateway image for users with a container daemon:
#   docker build -t sluice:dev .
# CI builds the same layout without a daemon or a base image: go run ./tools/imagebuild -verify
# (static binary at /usr/local/bin/sluice, user 65532, entrypoint sluice, command serve).

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/sluice

# distroless/static: CA certificates, /etc/passwd with "nonroot" (65532), no shell, no package manager.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
USER 65532:65532
EXPOSE 30000
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve"]
