# Shared by the repository's scripts: `say` prints a step, `apt_install` installs Debian
# packages with apt-get (as root, or through sudo without a password) or explains what is
# missing and exits.

say() { printf '\n== %s\n' "$*" >&2; }

# Installs Debian packages, or explains what is missing and exits.
apt_install() {
    local runner=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            runner=(sudo -n)
        else
            echo "$(basename "$0"): missing $*; install it (apt-get install $*) or run as root" >&2
            exit 1
        fi
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$(basename "$0"): missing $*, and this system has no apt-get; install it" >&2
        exit 1
    fi
    say "installing $*"
    ${runner[@]+"${runner[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -qq
    ${runner[@]+"${runner[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

