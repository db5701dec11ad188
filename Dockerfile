# The loopgate binary for compose.yaml: one static binary, the CityOps
# example beside it.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/loopgate ./cmd/loopgate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/loopgate /usr/local/bin/loopgate
COPY examples /app/examples
WORKDIR /app
ENTRYPOINT ["/usr/local/bin/loopgate"]
