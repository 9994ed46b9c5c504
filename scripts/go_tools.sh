# Sourced by the scripts that build the test tiers' Go tools (build_kube_apiserver.sh, build_controllers.sh):
# the steps they share, so both decide "up to date" and install the same way.
#
# Each tool module builds several mains with one `go build -o DIR/` (the Kubernetes libraries they share are
# compiled once), into ${TKF_TOOLS_HOME:-~/.cache/tkf-infra}/bin. Every binary has a stamp file beside it:
# a hash of what decides the build (the module's go.mod, go.sum and own *.go files, and the calling script)
# and the Go version. A re-run whose stamps all match is instant; otherwise the Go build cache makes the
# rebuild quick. A build goes to a temporary directory first (two checkouts may build at once) and each
# binary is moved into place with its stamp, so a killed build never leaves a binary that looks fresh.

GO_TOOLS_BIN="${TKF_TOOLS_HOME:-$HOME/.cache/tkf-infra}/bin"

go_tools_require() {  # go_tools_require LOG_PREFIX: exit with how to install Go when it is missing
  command -v go >/dev/null 2>&1 && return 0
  printf '[%s] Go is not installed. Install Go >= 1.26 (https://go.dev/dl/ or your package manager), then ' \
    "$1" >&2
  printf 're-run %s.\n' "$0" >&2
  exit 1
}

go_tools_stamp() {  # go_tools_stamp MODULE_DIR SCRIPT: the stamp value every binary of that module carries
  local src="$1" script="$2"
  local files=("$src/go.mod" "$src/go.sum" "$script")
  shopt -s nullglob
  files+=("$src"/*.go)
  shopt -u nullglob
  echo "$(cat "${files[@]}" | sha256sum | cut -c1-16) $(go env GOVERSION)"
}

go_tools_fresh() {  # go_tools_fresh WANT NAME...: true when every binary exists and carries the stamp WANT
  local want="$1" name
  shift
  for name in "$@"; do
    [ -x "$GO_TOOLS_BIN/$name" ] && [ -f "$GO_TOOLS_BIN/$name.stamp" ] \
      && [ "$(cat "$GO_TOOLS_BIN/$name.stamp")" = "$want" ] || return 1
  done
}

go_tools_build() {  # go_tools_build MODULE_DIR WANT LDFLAGS BUILT=NAME... -- PKG...
  # One `go build` of every PKG in MODULE_DIR (under nice: tests sharing the cores go first), then each
  # binary `go build -o DIR/` named BUILT (its package's last path element) installed as NAME with its stamp.
  local src="$1" want="$2" ldflags="$3" pair
  shift 3
  local pairs=()
  while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do pairs+=("$1"); shift; done
  shift
  mkdir -p "$GO_TOOLS_BIN"
  GO_TOOLS_TMP="$(mktemp -d "$GO_TOOLS_BIN/.build.XXXXXX")"
  trap 'rm -rf "${GO_TOOLS_TMP:-}"' EXIT  # also when the build is killed or fails (set -e)
  (cd "$src" && GOFLAGS="${GOFLAGS:--buildvcs=false}" CGO_ENABLED=0 nice go build -trimpath \
    -ldflags "$ldflags" -o "$GO_TOOLS_TMP/" "$@")
  for pair in "${pairs[@]}"; do
    mv "$GO_TOOLS_TMP/${pair%%=*}" "$GO_TOOLS_BIN/${pair#*=}"
    echo "$want" >"$GO_TOOLS_BIN/${pair#*=}.stamp"
  done
  rm -rf "$GO_TOOLS_TMP"
}
