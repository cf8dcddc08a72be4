#!/bin/sh
# install.sh: puts wcetd's binaries, man pages, shell completions, configuration file and its
# systemd, D-Bus, sysusers and tmpfiles files where the system looks for them. Idempotent (install(1) overwrites in place) and DESTDIR-aware, so
# packagers can stage into a root; with DESTDIR empty on a live system it also creates the user
# and reloads systemd and the bus, which a staging root must not do.
#
# Usage: [DESTDIR=/stage] [PREFIX=/usr] [BINDIR=target/release] systemd/install.sh
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr}
BINDIR=${BINDIR:-${CARGO_TARGET_DIR:-$root/target}/release}

# The daemon reads /etc/wcetd (compiled in: src/config.rs, src/bin/wcetd.rs), so a
# configuration staged anywhere else would be silently ignored.
if [ "${SYSCONFDIR:-/etc}" != /etc ]; then
    echo "install.sh: SYSCONFDIR=$SYSCONFDIR is not supported: wcetd reads /etc/wcetd/wcetd.toml and /etc/wcetd/kernels.d (compiled in), so a configuration installed under $SYSCONFDIR would never be read; accepted: SYSCONFDIR unset or /etc (stage into a root with DESTDIR)" >&2
    exit 1
fi
SYSCONFDIR=/etc
# The system bus reads policy only from /usr/share/dbus-1/system.d and /etc/dbus-1/system.d
# (not from \$PREFIX/share): under another prefix the policy goes to /etc, or the daemon is
# refused its name and never starts.
if [ "$PREFIX" = /usr ]; then
    POLICYDIR=/usr/share/dbus-1/system.d
else
    POLICYDIR=/etc/dbus-1/system.d
fi

for bin in wcetd wcetctl; do
    if [ ! -x "$BINDIR/$bin" ]; then
        echo "install.sh: $BINDIR/$bin is missing; build first with: cargo build --release" >&2
        exit 1
    fi
done

install -Dm0755 "$BINDIR/wcetd" "$DESTDIR$PREFIX/bin/wcetd"
install -Dm0755 "$BINDIR/wcetctl" "$DESTDIR$PREFIX/bin/wcetctl"
install -Dm0644 "$here/wcetd.service" "$DESTDIR$PREFIX/lib/systemd/system/wcetd.service"
install -Dm0644 "$here/org.wcetd.Wcetd1.conf" "$DESTDIR$POLICYDIR/org.wcetd.Wcetd1.conf"
install -Dm0644 "$here/org.wcetd.Wcetd1.service" "$DESTDIR$PREFIX/share/dbus-1/system-services/org.wcetd.Wcetd1.service"
install -Dm0644 "$here/wcetd.sysusers" "$DESTDIR$PREFIX/lib/sysusers.d/wcetd.conf"
install -Dm0644 "$here/wcetd.tmpfiles" "$DESTDIR$PREFIX/lib/tmpfiles.d/wcetd.conf"
install -d -m0755 "$DESTDIR$SYSCONFDIR/wcetd/kernels.d"
# Man pages and completions come from the binaries' own clap definitions, so they match --help.
generated=$(mktemp -d)
trap 'rm -rf "$generated"' EXIT
"$BINDIR/wcetd" --generate "$generated/wcetd"
"$BINDIR/wcetctl" generate "$generated/wcetctl"
for page in "$generated"/wcetd/man/*.8; do
    install -Dm0644 "$page" "$DESTDIR$PREFIX/share/man/man8/$(basename "$page")"
done
for page in "$generated"/wcetctl/man/*.1; do
    install -Dm0644 "$page" "$DESTDIR$PREFIX/share/man/man1/$(basename "$page")"
done
for bin in wcetd wcetctl; do
    install -Dm0644 "$generated/$bin/completions/$bin.bash" "$DESTDIR$PREFIX/share/bash-completion/completions/$bin"
    install -Dm0644 "$generated/$bin/completions/_$bin" "$DESTDIR$PREFIX/share/zsh/site-functions/_$bin"
    install -Dm0644 "$generated/$bin/completions/$bin.fish" "$DESTDIR$PREFIX/share/fish/vendor_completions.d/$bin.fish"
done
# The configuration file is the operator's: installed once, never overwritten.
if [ ! -e "$DESTDIR$SYSCONFDIR/wcetd/wcetd.toml" ]; then
    install -Dm0644 "$here/wcetd.toml" "$DESTDIR$SYSCONFDIR/wcetd/wcetd.toml"
fi
if [ -f "$root/docs/operations.md" ]; then
    install -Dm0644 "$root/docs/operations.md" "$DESTDIR$PREFIX/share/doc/wcetd/operations.md"
fi

# The unit hard-codes /usr/bin/wcetd and /usr/share/doc; point it at the real prefix when it differs.
if [ "$PREFIX" != /usr ]; then
    sed -i -e "s|^ExecStart=/usr/bin/wcetd|ExecStart=$PREFIX/bin/wcetd|" \
        -e "s|file:/usr/share/doc/wcetd/|file:$PREFIX/share/doc/wcetd/|" \
        "$DESTDIR$PREFIX/lib/systemd/system/wcetd.service"
fi

if [ -z "$DESTDIR" ] && [ "$(id -u)" = 0 ] && [ -d /run/systemd/system ]; then
    systemd-sysusers wcetd.conf 2>/dev/null || systemd-sysusers
    systemd-tmpfiles --create wcetd.conf 2>/dev/null || systemd-tmpfiles --create
    systemctl daemon-reload
    # The bus reads policy files only on reload; without it Calibration1 rules are not in force.
    busctl call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus ReloadConfig >/dev/null || true
    echo "install.sh: installed; start with: systemctl enable --now wcetd"
else
    echo "install.sh: staged into '${DESTDIR:-/}'; on the target run systemd-sysusers, systemd-tmpfiles --create, systemctl daemon-reload"
fi
