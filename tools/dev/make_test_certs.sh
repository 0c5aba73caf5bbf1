#!/usr/bin/env bash
# Test-only TLS material for tests/access.rs: a CA, a coordinator certificate
# it signed (SAN localhost and 127.0.0.1) and an unrelated CA. Valid for 100
# years; the keys are public, so never use them outside tests.
set -euo pipefail
D=${1:-tests/data/tls}
mkdir -p "$D" && cd "$D"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 36500 \
  -keyout ca.key -out ca.pem -subj "/CN=paraforge test CA"
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout server.key -out server.csr -subj "/CN=localhost"
printf "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n" > ext.cnf
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 36500 \
  -extfile ext.cnf -out server.pem
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 36500 \
  -keyout other-ca.key -out other-ca.pem -subj "/CN=some other CA"
rm -f server.csr ext.cnf ca.srl ca.key other-ca.key
