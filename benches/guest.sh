#!/usr/bin/env bash
# Runs programs inside a throwaway QEMU guest on this machine: a Debian
# kernel booted straight into an initramfs that holds busybox, the given
# executables (each at /bin/<its file name>) and the libraries they link.
# In the guest the script runs as root, with RLIMIT_NOFILE raised to
# 1,048,576, from a tmpfs working directory; its output comes back on the
# serial console, and the guest powers off when it ends.
#
# Usage: benches/guest.sh SCRIPT EXECUTABLE...
#   benches/guest.sh 'idle_fds --bench epoll' "${CARGO_TARGET_DIR:-target}"/release/deps/idle_fds-*
#
# Used by benches/idle_fds_vm.sh (100,000 idle fds, past this host's fd
# limit) and tests/other_kernel.sh (the test suite on another kernel).
#
# ACCEL=kvm uses hardware virtualisation; the default, ACCEL=tcg, emulates
# the CPU in software, which works everywhere (this machine's /dev/kvm
# exists, but a guest hangs in early boot: the host is itself a VM without
# nested virtualisation). Under TCG everything takes several times as long
# as on the host.
#
# Installs (Debian): qemu-system-x86, busybox-static; downloads Debian's
# linux-image-amd64 kernel package into $VM_DIR (default /tmp/evloop-vm).
set -euo pipefail
[ $# -ge 2 ] || { sed -n '9,10p' "$0"; exit 2; }
script=$1
shift
accel=${ACCEL:-tcg}
if [ "$accel" = kvm ]; then
    [ -e /dev/kvm ] || { echo "no /dev/kvm: cannot run a KVM guest here (try ACCEL=tcg)"; exit 1; }
    qemu_accel=(-enable-kvm -cpu host)
else
    qemu_accel=(-accel tcg,thread=multi -cpu max)
fi
vm=${VM_DIR:-/tmp/evloop-vm}
mkdir -p "$vm"

need() { command -v "$1" >/dev/null || apt-get install -y -q "$2" >/dev/null; }
need qemu-system-x86_64 qemu-system-x86
{ [ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1; } ||
    apt-get install -y -q busybox-static >/dev/null

# The kernel: Debian's, whatever linux-image-amd64 currently depends on.
kernel=$(ls "$vm"/kernel/boot/vmlinuz-* 2>/dev/null | head -n1 || true)
if [ -z "$kernel" ]; then
    pkg=$(apt-cache depends linux-image-amd64 | sed -n 's/.*Depends: \(linux-image-[0-9].*\)/\1/p' | head -n1)
    (cd "$vm" && apt-get download "$pkg" >/dev/null 2>&1 && dpkg-deb -x "$pkg"_*.deb kernel)
    kernel=$(ls "$vm"/kernel/boot/vmlinuz-* | head -n1)
fi

# The initramfs: busybox, the executables, their libraries, /init.
root=$(mktemp -d "$vm/root.XXXXXX")
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/{bin,dev,proc,sys,tmp}
cp /bin/busybox "$root/bin/busybox"
for exe in "$@"; do
    cp "$exe" "$root/bin/"
    for lib in $(ldd "$exe" | grep -o '/[^ ]*'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
done
# busybox's tools, where an executable of the same name is not there.
"$root/bin/busybox" --list | while read -r tool; do
    [ -e "$root/bin/$tool" ] || ln -s busybox "$root/bin/$tool"
done
cat >"$root/init" <<EOF
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
ulimit -Hn 1048576
ulimit -Sn 1048576
echo "guest: $accel, \$(grep -c ^processor /proc/cpuinfo) cpus, Linux \$(cat /proc/sys/kernel/osrelease), RLIMIT_NOFILE \$(ulimit -n)"
cd /tmp
( $script )
echo "guest: exit status \$?"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$vm/initrd.gz"

qemu-system-x86_64 "${qemu_accel[@]}" -smp 2 -m 4096 \
    -kernel "$kernel" -initrd "$vm/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" \
    -nographic -no-reboot -monitor none </dev/null |
    sed -u 's/\r$//'
