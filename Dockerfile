# The images compose.yaml runs, both built from this module:
#   target nats      nats-server at the exact version go.mod pins, the one
#                    every test of loopgate runs against;
#   target loopgate  (the default) one static loopgate binary, the CityOps
#                    example beside it.
# The build image names a Go patch release at least go.mod's go directive:
# the official images set GOTOOLCHAIN=local, so an older cached golang:1.26
# would refuse the module (deploy/composecheck checks it).
# Both run as distroless's nonroot user (65532). The directories they write
# (/data, /var/lib/loopgate) are created here, owned by that user, so the
# named volumes compose mounts on them start out writable by it.
FROM golang:1.26.8 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/loopgate ./cmd/loopgate \
 && CGO_ENABLED=0 go build -trimpath -o /out/nats-server github.com/nats-io/nats-server/v2 \
 && mkdir -p /out/nats-data /out/loopgate-data/outbox

FROM gcr.io/distroless/static-debian12:nonroot AS nats
COPY --from=build /out/nats-server /usr/local/bin/nats-server
COPY --from=build --chown=65532:65532 /out/nats-data /data
EXPOSE 4222 6222 8222
ENTRYPOINT ["/usr/local/bin/nats-server"]

FROM gcr.io/distroless/static-debian12:nonroot AS loopgate
COPY --from=build /out/loopgate /usr/local/bin/loopgate
COPY --from=build --chown=65532:65532 /out/loopgate-data /var/lib/loopgate
COPY examples /app/examples
WORKDIR /app
# serve, given no --listen or --data, listens where other containers reach
# it and stores its data in the directory its user owns.
ENV LOOPGATE_LISTEN=0.0.0.0:4222 LOOPGATE_DATA=/var/lib/loopgate
EXPOSE 4222
ENTRYPOINT ["/usr/local/bin/loopgate"]
