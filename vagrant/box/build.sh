#!/bin/sh
# Build the VM box locally (no box registry needed): Debian 12 debootstrapped into a qcow2
# disk with its kernel, GRUB, sshd, python3 (+ a venv holding mfusepy, the one dependency the
# nodes import), fuse3 and iptables, packaged for vagrant-libvirt and added as $KCH_BOX_NAME.
#
#   sh vagrant/box/build.sh            # as root; `make vms` runs it when the box is missing
#
# Output in vagrant/.box/: the .box file, the SSH key pair vagrant logs in with (made here, per
# box: never vagrant's well-known insecure key), and box.stamp (the hash of this recipe, so
# `make vms` rebuilds only when the recipe changed).
# Layout of a vagrant-libvirt box (vagrant-libvirt's documentation, "Box Format"): a tar of
# metadata.json, a Vagrantfile and box.img (qcow2).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
out=${KCH_BOX_DIR:-$here/../.box}
name=${KCH_BOX_NAME:-kch/debian12}
mirror=${KCH_MIRROR:-http://deb.debian.org/debian}
size=${KCH_BOX_SIZE:-6G}
suite=bookworm
# What the nodes need (docs/vms.md): sshd, python3 >= 3.11, fuse3 (lazyfs), iptables
# (partitions, link faults), rsync (vagrant's synced folder), sudo (user = "vagrant"
# inventories), ifupdown + DHCP (vagrant-libvirt finds a VM by its DHCP lease and configures the
# private network with ifupdown on Debian guests), chrony (the guests' clocks follow the
# host's: the trace checker orders events across hosts by them), a Java 17 runtime (Apache Kafka
# as the system under test, docs/kafka.md: its jars are copied by the harness, the JVM is not),
# and the kernel and boot loader.
packages=linux-image-cloud-amd64,grub-pc-bin,initramfs-tools,systemd-sysv,openssh-server,\
python3,python3-venv,fuse3,iptables,rsync,sudo,ifupdown,isc-dhcp-client,iproute2,procps,\
psmisc,ca-certificates,util-linux,e2fsprogs,chrony,openjdk-17-jre-headless

[ "$(id -u)" = 0 ] || { echo "build.sh: run as root (debootstrap, loop devices)" >&2; exit 1; }
# In a mount namespace of our own, with private propagation: a namespace another process
# creates meanwhile (ip netns, unshare) would otherwise copy the image's mount, keep its
# filesystem alive after our umount, and the image file would be read half-written.
if [ -z "${KCH_BOX_UNSHARED:-}" ]; then
    KCH_BOX_UNSHARED=1 exec unshare --mount --propagation private sh "$0" "$@"
fi
for tool in debootstrap qemu-img sfdisk losetup mkfs.ext4 ssh-keygen vagrant tar; do
    command -v "$tool" >/dev/null || {
        echo "build.sh: $tool is missing (make vms installs it: debootstrap qemu-utils fdisk vagrant)" >&2
        exit 1
    }
done

mkdir -p "$out"
# Outside the checkout: the root filesystem being built must not be seen by tools that walk it.
work=$(mktemp -d /var/tmp/kch-box-build.XXXXXX)
mnt=$work/root
loop=""
cleanup() {
    # Whatever happened, leave no mount or loop device behind.
    for m in dev/pts dev proc sys; do
        mountpoint -q "$mnt/$m" 2>/dev/null && umount -l "$mnt/$m"
    done
    mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
    [ -n "$loop" ] && losetup -d "$loop" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# The login key pair, made once per box build; Vagrantfile points config.ssh at it.
rm -f "$out/id_ed25519" "$out/id_ed25519.pub"
ssh-keygen -q -t ed25519 -N "" -C "kch-vagrant-box" -f "$out/id_ed25519"

echo "build.sh: disk image ($size, one ext4 partition)"
raw=$work/disk.raw
truncate -s "$size" "$raw"
echo 'start=2048, type=83, bootable' | sfdisk -q "$raw"
# The partition through a loop device at its offset (1 MiB; it runs to the end of the disk):
# partition scanning (losetup -P) needs udev or devtmpfs nodes a container may not have.
loop=$(losetup --find --show --offset 1048576 "$raw")
part=$loop
mkfs.ext4 -q -L kchroot "$part"
uuid=$(blkid -s UUID -o value "$part")
mkdir -p "$mnt"
mount "$part" "$mnt"

echo "build.sh: debootstrap $suite from $mirror (a few minutes)"
mkdir -p "$out/debs"  # downloaded packages, kept: a rebuild fetches only what changed
debootstrap --cache-dir="$out/debs" --include="$packages" "$suite" "$mnt" "$mirror" >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2; exit 1; }

mount --bind /dev "$mnt/dev"
mount --bind /dev/pts "$mnt/dev/pts"
mount -t proc proc "$mnt/proc"
mount -t sysfs sysfs "$mnt/sys"
cp /etc/resolv.conf "$mnt/etc/resolv.conf"
# The Python packages the nodes import (the node processes load replication/, nemesis/ and
# control/, whose package imports paramiko and the Toxiproxy client), with the version ranges
# the project's pyproject.toml gives them; Spark, pandas and the rest serve the harness only.
requirements=$(python3 -c '
import re, sys, tomllib
with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
node = ("mfusepy", "paramiko", "cryptography", "toxiproxy-python")
print(" ".join(d for d in deps if re.match(r"[A-Za-z0-9_.-]+", d).group(0) in node))
' "$here/../../pyproject.toml")
# Fetched here with the build machine's pip (and its certificate trust), as wheels for the
# image's Python (3.11, manylinux), installed in the image offline: the image trusts Debian's
# CA bundle only, and needs nothing else.
pip=$here/../../.venv/bin/pip
[ -x "$pip" ] || pip="python3 -m pip"
mkdir -p "$mnt/tmp/wheels"
# Every glibc level up to bookworm's 2.36 must be named: pip does not widen --platform.
platforms=""
for p in 2_36 2_35 2_34 2_28 2_17; do platforms="$platforms --platform manylinux_${p}_x86_64"; done
# shellcheck disable=SC2086  # one word per requirement or option, none has a blank
$pip download -q --only-binary=:all: --python-version 3.11 --implementation cp $platforms \
    --platform manylinux2014_x86_64 --platform any -d "$mnt/tmp/wheels" $requirements
install -m 644 "$out/id_ed25519.pub" "$work/authorized_keys"
cp "$work/authorized_keys" "$mnt/tmp/authorized_keys"
cp "$here/guest-setup.sh" "$mnt/tmp/guest-setup.sh"
chroot "$mnt" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    KCH_REQUIREMENTS="$requirements" sh /tmp/guest-setup.sh "$uuid" "$mirror"
# GRUB by hand, as grub-install would on a real disk: boot.img's first 440 bytes in the MBR
# (the partition table after them stays), core.img in the gap from sector 1. boot.img loads
# sector 1 and core.img's first sector the sectors after it, the defaults of both images
# (GRUB's boot.S and diskboot.S), so nothing needs patching. grub-install itself needs the
# partition's device to be a partition of the disk's device, which the offset loop is not.
chroot "$mnt" grub-mkimage -O i386-pc -o /tmp/core.img -p "(hd0,msdos1)/boot/grub" \
    biosdisk part_msdos ext2
mkdir -p "$mnt/boot/grub/i386-pc"
cp "$mnt"/usr/lib/grub/i386-pc/*.mod "$mnt"/usr/lib/grub/i386-pc/*.lst "$mnt/boot/grub/i386-pc/"
core_sectors=$(( ($(stat -c %s "$mnt/tmp/core.img") + 511) / 512 ))
[ "$core_sectors" -lt 2047 ] || { echo "build.sh: core.img does not fit before the partition" >&2; exit 1; }
dd if="$mnt/usr/lib/grub/i386-pc/boot.img" of="$raw" bs=440 count=1 conv=notrunc status=none
dd if="$mnt/tmp/core.img" of="$raw" bs=512 seek=1 conv=notrunc status=none
rm -f "$mnt/tmp/core.img"
rm -rf "$mnt/tmp/guest-setup.sh" "$mnt/tmp/authorized_keys" "$mnt/tmp/wheels"
echo "nameserver 192.168.121.1" >"$mnt/etc/resolv.conf"  # replaced by DHCP at boot
[ -s "$mnt/boot/grub/grub.cfg" ] && [ -s "$mnt/boot/grub/i386-pc/normal.mod" ] || {
    echo "build.sh: the boot files are missing from the image" >&2; exit 1; }
for m in dev/pts dev proc sys; do umount "$mnt/$m"; done
sync -f "$mnt/boot"
umount "$mnt"
# A filesystem that is complete and clean on the disk image, or no box.
e2fsck -fn "$loop" >"$work/e2fsck.log" 2>&1 || { cat "$work/e2fsck.log" >&2; exit 1; }
losetup -d "$loop"; loop=""

echo "build.sh: qcow2 and box"
box=$work/box
mkdir -p "$box"
qemu-img convert -O qcow2 "$raw" "$box/box.img"
rm -f "$raw"
virtual_size=$(( $(qemu-img info --output=json "$box/box.img" | python3 -c 'import json,sys; print(json.load(sys.stdin)["virtual-size"])') / 1073741824 ))
printf '{"provider": "libvirt", "format": "qcow2", "virtual_size": %s}\n' "$virtual_size" >"$box/metadata.json"
cat >"$box/Vagrantfile" <<'EOF'
# Box defaults (the project's vagrant/Vagrantfile sets the rest, including config.ssh).
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.disk_bus = "virtio"
  end
end
EOF
tar -C "$box" -cf "$out/kch-debian12.box" metadata.json Vagrantfile box.img
vagrant box add --force --name "$name" "$out/kch-debian12.box"
# The recipe hash: make vms compares it to decide whether to rebuild.
cat "$here/build.sh" "$here/guest-setup.sh" | sha256sum | cut -d' ' -f1 >"$out/box.stamp"
echo "build.sh: added box $name ($(du -h "$out/kch-debian12.box" | cut -f1))"
