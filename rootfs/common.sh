# common.sh: the steps every cubicle image shares, sourced by build-image.
#
# A recipe (rootfs/NAME.recipe) adds its packages and a configure step; this
# file holds what all images have in common: apt settings, the user, locale,
# timezone, the microVM init, hardening (no setuid, root locked) and the
# final cleanup (the microVM's kernel is rootfs/small-kernel's, built apart
# by build-image). Functions take the tree's path
# as $1 and run commands inside it with in_chroot / chroot_apt (build-image).
# Any change here changes every image's hash, so every image is rebuilt.

# shellcheck shell=bash

# Packages in every image (the recipe adds its own, build-image adds the
# Debian packages holding envd's shared libraries).
COMMON_PACKAGES=(
	bash coreutils ca-certificates curl python3 tini tzdata
	procps less iproute2 xz-utils unzip git
	e2fsprogs # resize2fs: cubicle-init grows the root to the VM's disk size
	# What the user installs with, without root (common_user_tools): pip
	# and venv, Node.js (npm itself is npm's own package: rootfs/npm).
	python3-pip python3-venv nodejs
)

# Writes stdin to the tree file $2 (mode $3, default 0644), replacing it.
put() {
	local root=$1 path=$2 mode=${3:-0644}
	mkdir -p "$(dirname "$root$path")"
	rm -f "$root$path"
	cat >"$root$path"
	chmod "$mode" "$root$path"
}

# Appends KEY=VALUE lines (stdin) to /etc/environment and
# /etc/cubicle/session.env (read by envd --session), skipping keys already set.
add_environment() {
	local root=$1 line f
	while IFS= read -r line; do
		[[ -z $line ]] && continue
		for f in /etc/environment /etc/cubicle/session.env; do
			touch "$root$f"
			grep -q "^${line%%=*}=" "$root$f" || printf '%s\n' "$line" >>"$root$f"
		done
	done
}

# apt inside the tree: the host's mirrors (deb822), lean installs, no service
# starts, no docs/man/locales (dpkg path-exclude, so later installs stay lean).
# $2 is a file of "URI SUITE COMPONENTS..." lines.
common_apt_setup() {
	local root=$1 sources=$2
	rm -f "$root/etc/apt/sources.list"
	awk '{
		comps = ""
		for (i = 3; i <= NF; i++) comps = comps (i > 3 ? " " : "") $i
		if (comps == "") comps = "main"
		key = $1 "|" comps
		if (key in suites) suites[key] = suites[key] " " $2
		else { order[++n] = key; suites[key] = $2 }
	}
	END {
		for (i = 1; i <= n; i++) {
			split(order[i], p, "|")
			if (i > 1) print ""
			print "Types: deb"
			print "URIs: " p[1]
			print "Suites: " suites[order[i]]
			print "Components: " p[2]
			print "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
		}
	}' "$sources" | put "$root" /etc/apt/sources.list.d/debian.sources

	put "$root" /etc/apt/apt.conf.d/01cubicle <<-'EOF'
		// cubicle: lean installs.
		APT::Install-Recommends "false";
		APT::Install-Suggests "false";
		Acquire::Languages "none";
	EOF
	put "$root" /etc/dpkg/dpkg.cfg.d/01cubicle-nodoc <<-'EOF'
		# cubicle: no documentation, manual pages or translations in the image.
		path-exclude=/usr/share/doc/*
		path-include=/usr/share/doc/*/copyright
		path-exclude=/usr/share/man/*
		path-exclude=/usr/share/info/*
		path-exclude=/usr/share/groff/*
		path-exclude=/usr/share/lintian/*
		path-exclude=/usr/share/linda/*
		path-exclude=/usr/share/locale/*
		path-include=/usr/share/locale/locale.alias
		path-exclude=/usr/share/help/*
		path-exclude=/usr/share/gtk-doc/*
	EOF
	put "$root" /usr/sbin/policy-rc.d 0755 <<-'EOF'
		#!/bin/sh
		# cubicle: never start services (the image has no init system).
		exit 101
	EOF
	cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
}

# The user, locale, timezone, hostname, session directories and the
# microVM's init: everything but the recipe's own settings.
common_configure() {
	local root=$1

	# An ordinary user; root keeps no password (locked), sudo is never installed.
	in_chroot "$root" groupadd -g 1000 user
	in_chroot "$root" useradd -m -u 1000 -g 1000 -s /bin/bash -c "cubicle user" user
	in_chroot "$root" passwd -q -l root
	install -d -m 0755 -o 1000 -g 1000 "$root/session" \
		"$root/session/input" "$root/session/output" "$root/session/working"
	chown root:root "$root/session"

	# Locale and timezone.
	put "$root" /etc/default/locale <<<"LANG=C.UTF-8"
	install -d "$root/etc/cubicle"
	printf 'LANG=C.UTF-8\n' | add_environment "$root"
	ln -sfn /usr/share/zoneinfo/Etc/UTC "$root/etc/localtime"
	put "$root" /etc/timezone <<<"Etc/UTC"

	# Names. resolv.conf is QEMU user networking's resolver; the container
	# driver binds its own over it.
	put "$root" /etc/hostname <<<"cubicle"
	put "$root" /etc/hosts <<-'EOF'
		127.0.0.1	localhost
		127.0.1.1	cubicle
		::1	localhost ip6-localhost ip6-loopback
		ff02::1	ip6-allnodes
		ff02::2	ip6-allrouters
	EOF
	put "$root" /etc/fstab <<<"# cubicle: filesystems are mounted by /sbin/cubicle-init or the container driver"

	# A machine id for D-Bus (fixed per build; cubicle-init makes a new one
	# per boot when the root is writable).
	tr -d '-' </proc/sys/kernel/random/uuid | put "$root" /etc/machine-id 0444
	if [[ -d $root/var/lib/dbus ]]; then
		ln -sfn /etc/machine-id "$root/var/lib/dbus/machine-id"
	fi

	# No services: there is no init system, and no rc links either.
	rm -f "$root"/etc/rc[0-6S].d/[SK]*

	common_init_script "$root"
	common_user_tools "$root"
}

# The user's own package tools, all without root (rootfs/README.md, "Installing
# software"): a default virtual environment first on PATH that also sees
# Debian's Python packages, npm with a global prefix in the home, the
# package helper's apt-get and apt (envd, which asks the root side of envd
# over /run/envd/pkg.sock), and the variables tools read for the trust
# store (the operator's certificates are added at each start by envd).
# The variables live in /etc/cubicle/user.env: every process envd runs as
# the user gets them, envd itself never (a user-writable directory on
# root's PATH would let the user plant programs root runs).
# $NPM_TREE (build-image) holds npm, installed from rootfs/npm's lock.
common_user_tools() {
	local root=$1 home=/home/user
	[[ -d ${NPM_TREE:-}/node_modules/npm ]] || die "no npm tree staged (NPM_TREE=${NPM_TREE:-})"

	# npm: its own package bundles what it needs (Debian's npm depends on
	# ~340 node-* packages, 230 MB more). Its built-in config (an npmrc in
	# its directory) sends global installs to the home and reads the
	# global config the operator's registry goes into (/etc/npmrc).
	rm -rf "$root/usr/local/lib/node_modules/npm"
	mkdir -p "$root/usr/local/lib/node_modules"
	cp -R "$NPM_TREE/node_modules/npm" "$root/usr/local/lib/node_modules/npm"
	chown -R root:root "$root/usr/local/lib/node_modules/npm"
	chmod -R u+rwX,go+rX,go-w "$root/usr/local/lib/node_modules/npm"
	ln -sfn ../lib/node_modules/npm/bin/npm-cli.js "$root/usr/local/bin/npm"
	ln -sfn ../lib/node_modules/npm/bin/npx-cli.js "$root/usr/local/bin/npx"
	put "$root" /usr/local/lib/node_modules/npm/npmrc <<-'EOF'
		globalconfig=/etc/npmrc
		prefix=${HOME}/.npm-global
		update-notifier=false
		fund=false
		audit=false
	EOF
	put "$root" /etc/npmrc <<<"# cubicle: envd writes the operator's registry here at each start (cubicled --npm-registry)"

	# The default virtual environment: pip installs land in the home, and
	# Debian's python3-* packages stay visible. Debian's pip serves it
	# (--without-pip saves a 15 MB copy); `pip install -U pip` puts a newer
	# one in the environment, which then wins.
	in_chroot "$root" python3 -m venv --system-site-packages --without-pip $home/.venv
	local pip
	for pip in pip pip3 pip3.11; do
		put "$root" $home/.venv/bin/$pip 0755 <<-EOF
			#!$home/.venv/bin/python3
			# cubicle: Debian's pip for the default environment (rootfs/common.sh).
			import sys
			from pip._internal.cli.main import main
			sys.exit(main())
		EOF
	done
	mkdir -p "$root$home/.npm-global/bin" "$root$home/.local/bin"
	chown -R 1000:1000 "$root$home/.venv" "$root$home/.npm-global" "$root$home/.local"

	# apt-get and apt for the user: envd's package helper (envd/pkg/).
	ln -sfn envd "$root/usr/local/bin/apt-get"
	ln -sfn envd "$root/usr/local/bin/apt"

	# The operator's certificates, alone, for Node (empty until envd's
	# setup writes them; Node takes an empty file without a warning).
	put "$root" /etc/ssl/cubicle-operator.pem </dev/null
	put "$root" /etc/cubicle/user.env <<-EOF
		PATH=$home/.venv/bin:$home/.npm-global/bin:$home/.local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		VIRTUAL_ENV=$home/.venv
		PIP_DISABLE_PIP_VERSION_CHECK=1
		SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
		REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
		PIP_CERT=/etc/ssl/certs/ca-certificates.crt
		NODE_EXTRA_CA_CERTS=/etc/ssl/cubicle-operator.pem
	EOF
}

# /sbin/cubicle-init, PID 1 of the microVM: mounts, hostname, network, the
# token from the kernel command line, then tini + envd. The container driver
# does not use it (it starts tini + envd itself).
common_init_script() {
	local root=$1
	put "$root" /sbin/cubicle-init 0755 <<-'EOF'
		#!/bin/sh
		# cubicle-init: PID 1 of a cubicle microVM (the container driver starts
		# tini + envd itself). Mounts the kernel filesystems, names the machine,
		# brings up QEMU user networking's static address, takes envd's token from
		# the kernel command line (cubicle.token=, at least 16 characters) and
		# hides it there, then becomes tini with envd under it. Grows the root
		# file system to its disk's size first. Kernel arguments:
		#   cubicle.token=TOKEN       required
		#   cubicle.session=desktop   optional (default: /etc/cubicle/session)
		#   cubicle.resolution=WxH    optional, the desktop's screen (envd's default)
		#   cubicle.deny=A/N,...      required: the egress policy's denies (prohibit
		#                             routes in table 1000), besides 10.0.2.2
		#   cubicle.allow=A/N,...     optional: its allows (throw routes: on to main)
		PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		export PATH

		mnt() { # TYPE DIR OPTIONS
		    mkdir -p "$2"
		    mountpoint -q "$2" || mount -t "$1" -o "$3" "$1" "$2"
		}
		mount -o remount,rw / 2>/dev/null
		mnt proc /proc nosuid,nodev,noexec
		mnt sysfs /sys nosuid,nodev,noexec
		mnt devtmpfs /dev mode=0755,nosuid
		mnt devpts /dev/pts gid=5,mode=0620,ptmxmode=0666,nosuid,noexec
		mnt tmpfs /dev/shm mode=1777,nosuid,nodev
		mnt tmpfs /run mode=0755,nosuid,nodev
		mnt tmpfs /tmp mode=1777,nosuid,nodev
		[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd

		# The VM's disk (a qcow2 overlay) may be larger than the image's ext4:
		# grow the root to fill it, online (a no-op once it does).
		if [ -b /dev/vda ] && ! resize2fs /dev/vda >/run/resize2fs.log 2>&1; then
		    echo "cubicle-init: resize2fs /dev/vda failed:" >&2
		    cat /run/resize2fs.log >&2
		fi

		echo cubicle >/proc/sys/kernel/hostname
		tr -d - 2>/dev/null </proc/sys/kernel/random/uuid >/etc/machine-id

		ip link set lo up
		# IPv6 stays off (QEMU's user networking has it off too): no address
		# but lo's ::1, no route.
		for c in default eth0; do
		    [ -w /proc/sys/net/ipv6/conf/$c/disable_ipv6 ] &&
		        echo 1 >/proc/sys/net/ipv6/conf/$c/disable_ipv6
		done
		if [ -e /sys/class/net/eth0 ]; then
		    ip link set eth0 up
		    ip addr add 10.0.2.15/24 dev eth0
		    ip route add default via 10.0.2.2
		    echo "nameserver 10.0.2.3" >/etc/resolv.conf
		fi

		# /session: the host's session directory over virtio-9p, when the
		# computer has one (QEMU's mount tag "session"; see host/README.md).
		if grep -qs session /sys/bus/virtio/drivers/9pnet_virtio/*/mount_tag; then
		    mkdir -p /session
		    mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,nosuid,nodev \
		        session /session || echo "cubicle-init: cannot mount /session" >&2
		fi

		token= session= resolution= deny= allow=
		[ -r /etc/cubicle/session ] && read -r session </etc/cubicle/session
		for arg in $(cat /proc/cmdline); do
		    case "$arg" in
		    cubicle.token=*) token=${arg#cubicle.token=} ;;
		    cubicle.deny=*) deny=${arg#cubicle.deny=} ;;
		    cubicle.allow=*) allow=${arg#cubicle.allow=} ;;
		    cubicle.session=*) session=${arg#cubicle.session=} ;;
		    cubicle.resolution=*) resolution=${arg#cubicle.resolution=} ;;
		    esac
		done
		if [ -z "$token" ]; then
		    echo "cubicle-init: no cubicle.token= on the kernel command line" >&2
		    exec sh
		fi

		# Outbound only: QEMU's user networking makes the guest's connections
		# from the host, so without this the guest reaches the host's own
		# addresses, link-local, private and CGNAT ranges behind it (the egress
		# policy, host/README.md: cubicle.deny= as prohibit routes, cubicle.allow=
		# as throw routes, in table 1000, looked up before main), and 10.0.2.2 is
		# the host's loopback. Replies to the host's forward to envd come from
		# envd's port to 10.0.2.2 and pass; the user, without CAP_NET_ADMIN,
		# cannot undo any of it. Without it, no envd.
		fail=
		for net in $(echo "$deny" | tr , ' '); do
		    ip route add prohibit "$net" table 1000 || fail=1
		done
		for net in $(echo "$allow" | tr , ' '); do
		    ip route add throw "$net" table 1000 || fail=1
		done
		ip rule add to 10.0.2.2 ipproto 6 sport 7777 lookup main pref 100 || fail=1
		ip rule add to 10.0.2.2 prohibit pref 101 || fail=1
		ip rule add lookup 1000 pref 200 || fail=1
		if [ -n "$fail" ] || [ -z "$deny" ]; then
		    echo "cubicle-init: cannot keep the guest away from the host (cubicle.deny=$deny)" >&2
		    exec sh
		fi
		(umask 077 && printf '%s\n' "$token" >/run/envd.token)
		# Hide the token from the user: /proc/cmdline without it. A bind over a
		# proc file also stops a user namespace from mounting a fresh proc.
		sed 's/cubicle\.token=[^ ]*/cubicle.token=-/' /proc/cmdline >/run/cmdline
		mount --bind -o ro /run/cmdline /proc/cmdline

		# --guest: envd is this computer's root agent (the user's package
		# helper, the host's setup at each start: envd/guest/).
		set -- --listen tcp:0.0.0.0:7777 --token-file /run/envd.token --user user --guest
		case "$session" in
		"" | none) ;;
		*) set -- "$@" --session "$session" ;;
		esac
		# The computer's screen (the host's WxH, as the container driver
		# passes it); envd checks it and refuses a bad one.
		case "$session:$resolution" in
		desktop:*[!0-9x]* | desktop:) ;;
		desktop:*) set -- "$@" --resolution "$resolution" ;;
		esac
		cd /
		# envd is root: it and everything it starts lose, for good (the bounding
		# set), what could undo the network rules above or change the kernel
		# under them: network administration, raw sockets, module loading,
		# raw I/O, kexec. (envd needs CAP_SYS_TIME for the clock, kept.)
		exec setpriv --bounding-set -net_admin,-net_raw,-sys_module,-sys_rawio,-sys_boot -- \
		    tini -s -- /usr/local/bin/envd "$@"
	EOF
}

# The last step of every image: nothing setuid or with file capabilities,
# no sudo, no package caches, lists, docs, logs.
common_finish() {
	local root=$1 f

	# Nothing may give root: drop every setuid/setgid bit and file capability.
	find "$root" -xdev ! -type l -perm /6000 -exec chmod ug-s {} +
	# (with the image's own python3: every image has it, the host may not).
	run_logged in_chroot "$root" python3 - <<-'EOF'
		import os
		for d, dirs, files in os.walk("/"):
		    if d == "/":
		        dirs[:] = [x for x in dirs if x not in ("proc", "sys", "dev")]
		    for n in files:
		        p = os.path.join(d, n)
		        try:
		            if "security.capability" in os.listxattr(p, follow_symlinks=False):
		                os.removexattr(p, "security.capability", follow_symlinks=False)
		                print("removed file capabilities from", p)
		        except OSError:
		            pass
	EOF
	if [[ -e $root/usr/bin/sudo || -e $root/usr/bin/doas ]]; then
		die "sudo/doas got installed (a recipe package depends on it)"
	fi

	rm -f "$root/usr/sbin/policy-rc.d"
	in_chroot "$root" apt-get clean
	rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin \
		"$root"/var/cache/apt/archives/*.deb "$root"/var/cache/debconf/*-old \
		"$root"/var/lib/dpkg/*-old "$root"/var/cache/ldconfig/aux-cache \
		"$root"/var/log/* "$root"/tmp/* "$root"/var/tmp/* "$root"/root/.cache
	mkdir -p "$root/var/lib/apt/lists/partial"
	# What dpkg's path-exclude could not catch (installed by debootstrap).
	find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete 2>/dev/null || true
	find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
	for f in man info groff lintian linda help gtk-doc; do
		rm -rf "${root:?}/usr/share/$f"
	done
	find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} + 2>/dev/null || true
	put "$root" /etc/resolv.conf <<<"nameserver 10.0.2.3"
}
