#!/usr/bin/env bash
# A real Kubernetes API server (kube-apiserver v1.20.2 + etcd) on loopback, for tests of code
# that schedules pods (watch pods and nodes, bind pods, write conditions and events).
#
# No kube-apiserver binary is packaged anywhere this machine can reach, so it is built from
# Debian bookworm's `kubernetes` source package (the full upstream 1.20.2 tree with vendor/),
# offline, with Debian's Go 1.19: about 5 minutes on 2 cores the first time, then cached.
# There is no kubelet, controller-manager or default scheduler: nodes are API objects that a
# test creates, pods never run unless a test patches their status, and binding is up to you.
# 1.20 has pods/binding, watches, RBAC, events, admission webhooks; it has no scheduling gates.
#
#   k8s-dev-apiserver.sh build            build (or reuse) the binary in $K8S_DEV_CACHE
#   k8s-dev-apiserver.sh start DIR        build if needed, start etcd + kube-apiserver, wait ready
#   k8s-dev-apiserver.sh stop DIR         stop what `start DIR` started
#   k8s-dev-apiserver.sh restart DIR      stop and start the kube-apiserver only (same etcd,
#                                         certificates and tokens: clients keep working)
#
# After `start DIR`: DIR/kubeconfig (admin, system:masters), DIR/ca.crt, DIR/admin.token,
# DIR/scheduler.token (user `ordo-scheduler`, bound to ClusterRole system:kube-scheduler),
# DIR/ordo.token (user `ordo`, bound to nothing: tests bind it to deploy/rbac.yaml's ClusterRole),
# DIR/server (the https URL). Ports: K8S_DEV_API_PORT (16443), K8S_DEV_ETCD_PORT (23790).
# K8S_DEV_APISERVER_ARGS: more kube-apiserver flags (e.g. --watch-cache=false), kept by restart.
# Adapted for ordo from the shared tools (restart, extra flags); see docs/KUBERNETES.md.
set -euo pipefail
CACHE=${K8S_DEV_CACHE:-$HOME/.cache/k8s-dev-apiserver}
BIN=$CACHE/kube-apiserver-1.20.2
API_PORT=${K8S_DEV_API_PORT:-16443}
ETCD_PORT=${K8S_DEV_ETCD_PORT:-23790}

die() { echo "k8s-dev-apiserver: $*" >&2; exit 1; }

install_packages() {
  local need=()
  command -v etcd >/dev/null || need+=(etcd-server etcd-client)
  [ -x /usr/lib/go-1.19/bin/go ] || command -v go >/dev/null || need+=(golang-go)
  [ -d /usr/share/gocode/src/github.com/modern-go/reflect2 ] || need+=(golang-github-modern-go-reflect2-dev)
  [ -d /usr/share/gocode/src/github.com/json-iterator/go ] || need+=(golang-github-json-iterator-go-dev)
  command -v openssl >/dev/null || need+=(openssl)
  command -v curl >/dev/null || need+=(curl)
  [ ${#need[@]} -eq 0 ] && return
  export DEBIAN_FRONTEND=noninteractive
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${need[@]}" ca-certificates >/dev/null
}

build() {
  [ -x "$BIN" ] && return
  install_packages
  local W; W=$(mktemp -d /tmp/k8s-dev-build.XXXXXX)
  # Debian source lists beside (not in) the system's: the system's deb822 sources as deb-src.
  mkdir -p "$W/lists/partial" "$W/src"
  local srcs=(/etc/apt/sources.list.d/*.sources)
  [ -e "${srcs[0]}" ] || die "no deb822 .sources file in /etc/apt/sources.list.d to derive deb-src from"
  for f in "${srcs[@]}"; do grep -q 'debian' "$f" && sed 's/^Types: *deb$/Types: deb-src/' "$f"; echo; done \
    > "$W/debsrc.sources"
  local opt=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$W/parts" -o Dir::State::Lists="$W/lists")
  mkdir -p "$W/parts"; mv "$W/debsrc.sources" "$W/parts/"
  apt-get "${opt[@]}" update -qq
  (cd "$W/src" && apt-get "${opt[@]}" source --download-only kubernetes >/dev/null 2>&1) \
    || die "apt-get source kubernetes failed"
  tar -xzf "$W"/src/kubernetes_*.orig.tar.gz -C "$W/src"
  local S; S=$(find "$W/src" -maxdepth 1 -type d -name 'kubernetes-1.20*' | head -n 1)
  [ -n "$S" ] || die "no kubernetes-1.20 tree in the source package"
  # The vendored reflect2 1.0.1 breaks with Go >= 1.18: use Debian's reflect2 and json-iterator.
  for p in github.com/modern-go/reflect2 github.com/json-iterator/go; do
    rm -rf "$S/vendor/$p"; cp -r "/usr/share/gocode/src/$p" "$S/vendor/$p"; rm -f "$S/vendor/$p/go.mod" "$S/vendor/$p/go.sum"
  done
  local GO=/usr/lib/go-1.19/bin/go; [ -x "$GO" ] || GO=$(command -v go)
  export GOPATH=$W/gopath GOCACHE=${K8S_DEV_GOCACHE:-$CACHE/gocache} GO111MODULE=off CGO_ENABLED=0 \
         GOPROXY=off GOFLAGS= GOTOOLCHAIN=local
  mkdir -p "$GOPATH/src/k8s.io"; ln -sfn "$S" "$GOPATH/src/k8s.io/kubernetes"
  (
    cd "$GOPATH/src/k8s.io/kubernetes"
    # The tarball lacks the generated OpenAPI definitions that upstream's make generates.
    nice -n 10 "$GO" build -o "$W/openapi-gen" ./vendor/k8s.io/kube-openapi/cmd/openapi-gen
    dirs=$(grep -Rl --include='*.go' '^// *+k8s:openapi-gen=' pkg cmd plugin test vendor/k8s.io/ \
      | grep -v -E '^vendor/k8s.io/(code-generator|sample-apiserver)/' | xargs -n1 dirname | LC_ALL=C sort -u \
      | sed 's#^#k8s.io/kubernetes/#' | paste -sd,)
    nice -n 10 "$W/openapi-gen" --logtostderr -i "$dirs" -p k8s.io/kubernetes/pkg/generated/openapi \
      -O zz_generated.openapi -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt -r /dev/null 2>/dev/null
    ld="-s -w"
    for v in k8s.io/kubernetes/vendor/k8s.io/component-base/version k8s.io/kubernetes/vendor/k8s.io/client-go/pkg/version; do
      ld="$ld -X $v.gitVersion=v1.20.2 -X $v.gitMajor=1 -X $v.gitMinor=20 -X $v.gitTreeState=clean"
    done
    mkdir -p "$CACHE"
    nice -n 10 "$GO" build -p 2 -tags providerless -ldflags "$ld" -o "$BIN.tmp" ./cmd/kube-apiserver
  )
  mv "$BIN.tmp" "$BIN"
  # The binary is what is cached; the Go build cache (gigabytes) is not needed once it exists.
  rm -rf "$W"; [ -n "${K8S_DEV_GOCACHE:-}" ] || rm -rf "$CACHE/gocache"
}

launch() {
  local D=$1
  # shellcheck disable=SC2086
  "$BIN" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port="$API_PORT" \
    --tls-cert-file="$D/certs/apiserver.crt" --tls-private-key-file="$D/certs/apiserver.key" --cert-dir="$D/certs" \
    --service-account-issuer=https://kubernetes.default.svc \
    --service-account-key-file="$D/certs/sa.pub" --service-account-signing-key-file="$D/certs/sa.key" \
    --token-auth-file="$D/certs/tokens.csv" --authorization-mode=RBAC \
    --service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none \
    --disable-admission-plugins=ServiceAccount $(cat "$D/apiserver.args" 2>/dev/null) >>"$D/apiserver.log" 2>&1 &
  echo $! > "$D/apiserver.pid"
}

wait_ready() {
  local D=$1 url; url=$(cat "$D/server")
  local c=(curl -sf --cacert "$D/ca.crt" -H "Authorization: Bearer $(cat "$D/admin.token")")
  for _ in $(seq 240); do "${c[@]}" "$url/readyz" >/dev/null 2>&1 && return 0; sleep 0.25; done
  tail -n 20 "$D/apiserver.log" >&2; die "kube-apiserver not ready after 60 s"
}

restart() {
  local D=$1
  [ -f "$D/apiserver.pid" ] || die "nothing started in $D"
  stop_one "$D" apiserver
  launch "$D"
  wait_ready "$D"
  echo "kube-apiserver restarted at $(cat "$D/server")"
}

start() {
  local D=$1; build
  mkdir -p "$D"; D=$(cd "$D" && pwd)
  [ -f "$D/apiserver.pid" ] && kill -0 "$(cat "$D/apiserver.pid")" 2>/dev/null && die "already running in $D"
  mkdir -p "$D/certs"
  openssl req -x509 -newkey rsa:2048 -nodes -days 7 -subj /CN=k8s-dev-ca -keyout "$D/certs/ca.key" -out "$D/ca.crt" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj /CN=kube-apiserver -keyout "$D/certs/apiserver.key" -out "$D/certs/apiserver.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$D/certs/ext.cnf"
  openssl x509 -req -in "$D/certs/apiserver.csr" -CA "$D/ca.crt" -CAkey "$D/certs/ca.key" -CAcreateserial -days 7 \
    -extfile "$D/certs/ext.cnf" -out "$D/certs/apiserver.crt" 2>/dev/null
  openssl genrsa -out "$D/certs/sa.key" 2048 2>/dev/null
  openssl rsa -in "$D/certs/sa.key" -pubout -out "$D/certs/sa.pub" 2>/dev/null
  local admin sched ordo
  admin=$(openssl rand -hex 16); sched=$(openssl rand -hex 16); ordo=$(openssl rand -hex 16)
  printf '%s\n' "$admin,admin,admin,\"system:masters\"" "$sched,ordo-scheduler,ordo-scheduler,\"\"" \
    "$ordo,ordo,ordo,\"\"" > "$D/certs/tokens.csv"
  echo "$admin" > "$D/admin.token"; echo "$sched" > "$D/scheduler.token"; echo "$ordo" > "$D/ordo.token"
  chmod 600 "$D/admin.token" "$D/scheduler.token" "$D/ordo.token" "$D/certs/tokens.csv"
  etcd --data-dir "$D/etcd" --name default \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 10))" \
    --initial-cluster "default=http://127.0.0.1:$((ETCD_PORT + 10))" >"$D/etcd.log" 2>&1 &
  echo $! > "$D/etcd.pid"
  echo "${K8S_DEV_APISERVER_ARGS:-}" > "$D/apiserver.args"
  local url="https://127.0.0.1:$API_PORT"; echo "$url" > "$D/server"
  launch "$D"
  cat > "$D/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: dev, cluster: {server: "$url", certificate-authority: "$D/ca.crt"}}]
users: [{name: admin, user: {token: "$admin"}}]
contexts: [{name: dev, context: {cluster: dev, user: admin}}]
current-context: dev
KC
  chmod 600 "$D/kubeconfig"
  wait_ready "$D"
  local c=(curl -sf --cacert "$D/ca.crt" -H "Authorization: Bearer $admin")
  "${c[@]}" -X POST -H 'Content-Type: application/json' "$url/apis/rbac.authorization.k8s.io/v1/clusterrolebindings" \
    -d '{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"dev-ordo-scheduler"},
         "roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"system:kube-scheduler"},
         "subjects":[{"kind":"User","name":"ordo-scheduler"}]}' >/dev/null
  echo "kube-apiserver ready at $url; KUBECONFIG=$D/kubeconfig"
}

stop_one() {
  local D=$1 f=$2
  if [ -f "$D/$f.pid" ]; then
    local p; p=$(cat "$D/$f.pid"); kill "$p" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$p" 2>/dev/null || true; rm -f "$D/$f.pid"
  fi
}

stop() {
  local D=$1
  for f in apiserver etcd; do stop_one "$D" "$f"; done
}

case "${1:-}" in
  build) build; echo "$BIN" ;;
  start) [ $# -ge 2 ] || die "usage: $0 start DIR"; start "$2" ;;
  stop)  [ $# -ge 2 ] || die "usage: $0 stop DIR"; stop "$2" ;;
  restart) [ $# -ge 2 ] || die "usage: $0 restart DIR"; restart "$2" ;;
  *) die "usage: $0 build | start DIR | stop DIR | restart DIR" ;;
esac
