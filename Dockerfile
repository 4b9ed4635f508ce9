# A minimal image: the static-ish release binary on a distroless base with glibc.
# Build: docker build -t occ-worker .   Run: docker run -e OCC_DATABASE_URL=... occ-worker run
FROM rust:1.92-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock build.rs ./
COPY src src
COPY sql sql
RUN cargo build --release --locked --bin occ-worker

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/occ-worker /usr/local/bin/occ-worker
USER nonroot
EXPOSE 9464
ENV OCC_WORKER_HTTP_ADDR=0.0.0.0:9464
ENTRYPOINT ["/usr/local/bin/occ-worker"]
CMD ["run"]
