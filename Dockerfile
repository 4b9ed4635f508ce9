# The occ-worker image: nothing but a static, stripped binary, its man page, the CA roots and
# a non-root user, on an empty base, so it builds without any registry. Build it with scripts/build-image,
# which stages target/image/ (the only part of the checkout .dockerignore lets into the build
# context) and then runs `docker build -t occ-worker:latest .`.
# Run: docker run -e OCC_DATABASE_URL=… -e OCC_COMPUTE_DRIVER=kubernetes … occ-worker run
FROM scratch
COPY target/image/rootfs/ /
USER 65532:65532
EXPOSE 9464
ENV OCC_WORKER_HTTP_ADDR=0.0.0.0:9464 \
    SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
ENTRYPOINT ["/usr/local/bin/occ-worker"]
CMD ["run"]
