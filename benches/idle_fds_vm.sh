#!/usr/bin/env bash
# Runs benches/idle_fds.rs inside a QEMU guest on this machine, as root of
# the guest, where RLIMIT_NOFILE can be raised past 100,000 (the host's hard
# limit is 20,000, and raising it needs CAP_SYS_RESOURCE, which the host
# session lacks). The guest is a Debian kernel booted straight into an
# initramfs holding busybox, the bench binary and the libraries it links;
# nothing else runs in it. Criterion's output comes back on the serial
# console.
#
# Usage: benches/idle_fds_vm.sh [criterion arguments ...]
#   benches/idle_fds_vm.sh                 # every backend and size
#   benches/idle_fds_vm.sh 'epoll|poll/'   # a filter, as for cargo bench
#
# ACCEL=kvm uses hardware virtualisation; the default, ACCEL=tcg, emulates
# the CPU in software, which works everywhere (this machine's /dev/kvm
# exists, but a guest hangs in early boot: the host is itself a VM without
# nested virtualisation). Under TCG every time is many times the native
# one: compare the sizes of one row, not the guest's numbers with the
# host's.
#
# Installs (Debian): qemu-system-x86, busybox-static; downloads Debian's
# linux-image-amd64 kernel package into $VM_DIR (default /tmp/evloop-vm).
# Builds into $CARGO_TARGET_DIR (default: target).
set -euo pipefail
cd "$(dirname "$0")/.."
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

# The bench binary.
bin=$(cargo bench --bench idle_fds --no-run --message-format=json 2>/dev/null |
    sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[ -x "$bin" ] || { echo "could not build the idle_fds bench"; exit 1; }

# The initramfs: busybox, the binary, its libraries, /init.
root="$vm/root"
rm -rf "$root"
mkdir -p "$root"/{bin,dev,proc,sys,tmp}
cp /bin/busybox "$root/bin/busybox"
for tool in sh mount poweroff cat grep; do ln -s busybox "$root/bin/$tool"; done
cp "$bin" "$root/bench"
for lib in $(ldd "$bin" | grep -o '/[^ ]*'); do
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
done
filter=""
for f in "$@"; do filter="$filter '$f'"; done
cat >"$root/init" <<EOF
#!/bin/sh
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
# Past 100,000 idle fds plus the bench's own.
ulimit -Hn 1048576
ulimit -Sn 1048576
echo "guest: $accel, \$(grep -c ^processor /proc/cpuinfo) cpus, Linux \$(cat /proc/sys/kernel/osrelease), RLIMIT_NOFILE \$(ulimit -n)"
cd /tmp
/bench --bench $filter
echo "guest: bench exit status \$?"
poweroff -f
EOF
chmod +x "$root/init"
(cd "$root" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$vm/initrd.gz"

qemu-system-x86_64 "${qemu_accel[@]}" -smp 2 -m 4096 \
    -kernel "$kernel" -initrd "$vm/initrd.gz" \
    -append "console=ttyS0 quiet panic=-1" \
    -nographic -no-reboot -monitor none </dev/null |
    tr -d '\r'
