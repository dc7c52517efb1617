/* persist, for md arrays: without an ARRAY line in mdadm.conf and that file in the initramfs, an
 * array may assemble at boot as /dev/md127 (or not before the root file system needs it). When
 * arrays are active, their ARRAY lines (from sysfs: the array, metadata version, UUID) go into a
 * block of mdadm.conf that nvmetune owns between two marker lines, and the initramfs is rebuilt.
 * A dry run prints each change instead. */
#include "nvmetune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BEGIN_MARK "# nvmetune: begin (arrays; rewritten by nvmetune persist)"
#define END_MARK "# nvmetune: end"

/* "3f1c2a4e-8b7d-4f20-9a61-5c0d2e7b9a13" (sysfs) as mdadm writes it: 3f1c2a4e:8b7d4f20:... */
static int mdadm_uuid(const char *in, char *out, size_t len)
{
	char hex[33];
	size_t n = 0;
	for (const char *p = in; *p && n < 32; p++)
		if ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))
			hex[n++] = *p;
		else if (*p != '-' && *p != ':')
			return -1;
	if (n != 32)
		return -1;
	hex[32] = 0;
	snprintf(out, len, "%.8s:%.8s:%.8s:%.8s", hex, hex + 8, hex + 16, hex + 24);
	return 0;
}

/* The ARRAY lines of the active arrays, into buf. Returns how many. */
static int array_lines(char *buf, size_t len)
{
	char **md;
	int n = raid_list(&md), k = 0;
	buf[0] = 0;
	for (int i = 0; i < n; i++) {
		char rel[PATH_MAX], uuid[64] = "", meta[32] = "", u[48], lv[32] = "";
		snprintf(rel, sizeof(rel), "block/%s/md/level", md[i]);
		if (sys_read(rel, lv, sizeof(lv)) || !lv[0])
			continue; /* inactive */
		snprintf(rel, sizeof(rel), "block/%s/md/uuid", md[i]);
		if (sys_read(rel, uuid, sizeof(uuid)) || mdadm_uuid(uuid, u, sizeof(u)))
			continue;
		snprintf(rel, sizeof(rel), "block/%s/md/metadata_version", md[i]);
		if (sys_read(rel, meta, sizeof(meta)) || !meta[0])
			snprintf(meta, sizeof(meta), "1.2");
		snprintf(buf + strlen(buf), len - strlen(buf), "ARRAY /dev/%s metadata=%s UUID=%s\n",
			 md[i], meta, u);
		k++;
	}
	if (n > 0)
		names_free(md, n);
	return k;
}

/* The new mdadm.conf: the old one without nvmetune's block, then the block. malloc'd. */
static char *merge_conf(const char *old, const char *lines)
{
	size_t cap = (old ? strlen(old) : 0) + strlen(lines) + 256;
	char *out = malloc(cap), *o = out;
	if (!out)
		return NULL;
	bool in = false;
	for (const char *p = old; p && *p;) {
		const char *e = strchr(p, '\n');
		size_t l = e ? (size_t)(e - p) : strlen(p);
		if (!in && l == strlen(BEGIN_MARK) && !strncmp(p, BEGIN_MARK, l))
			in = true;
		else if (in && l == strlen(END_MARK) && !strncmp(p, END_MARK, l))
			in = false;
		else if (!in) {
			memcpy(o, p, l);
			o += l;
			*o++ = '\n';
		}
		p += l + (e != NULL);
	}
	o += sprintf(o, "%s\n%s%s\n", BEGIN_MARK, lines, END_MARK);
	*o = 0;
	return out;
}

static bool in_path(const char *prog)
{
	const char *path = getenv("PATH");
	char dir[PATH_MAX], p[PATH_MAX + 64];
	for (const char *s = path ? path : "/usr/sbin:/usr/bin:/sbin:/bin"; *s;) {
		size_t n = strcspn(s, ":");
		snprintf(dir, sizeof(dir), "%.*s", (int)n, s);
		snprintf(p, sizeof(p), "%s/%s", n ? dir : ".", prog);
		if (!access(p, X_OK))
			return true;
		s += n + (s[n] == ':');
	}
	return false;
}

int persist_md(const char *conf, bool dry, bool initramfs, bool verbose)
{
	char lines[8192];
	if (array_lines(lines, sizeof(lines)) == 0)
		return EXIT_OK; /* no array: nothing to assemble at boot */
	char *old = NULL;
	size_t ol;
	int rc = read_file(conf, &old, &ol);
	if (rc && rc != -ENOENT) {
		cli_err("persist: %s: %s", conf, strerror(-rc));
		return rc == -EACCES || rc == -EPERM ? EXIT_PERM : EXIT_FAIL;
	}
	char *text = merge_conf(old, lines);
	free(old);
	if (!text) {
		cli_err("persist: out of memory");
		return EXIT_FAIL;
	}
	if (dry) {
		if (verbose)
			printf("would write to %s:\n%s", conf, strstr(text, BEGIN_MARK));
	} else if ((rc = write_file_atomic(conf, text, strlen(text), 0644))) {
		cli_err("persist: %s: %s", conf, strerror(-rc));
		free(text);
		return rc == -EACCES || rc == -EPERM || rc == -EROFS ? EXIT_PERM : EXIT_FAIL;
	} else if (verbose) {
		printf("wrote the ARRAY lines of the active arrays to %s\n", conf);
	}
	free(text);
	if (!initramfs)
		return EXIT_OK;
	/* Debian and Ubuntu have update-initramfs; Fedora, RHEL and Arch-with-dracut have dracut. */
	char *upd[] = {"update-initramfs", "-u", NULL}, *dracut[] = {"dracut", "-f", NULL};
	if (dry) {
		if (verbose)
			printf("would run: update-initramfs -u (or dracut -f where that is missing)\n");
		return EXIT_OK;
	}
	/* Looked up first: run_argv() reports a program it cannot start, and one missing is normal. */
	rc = in_path(upd[0]) ? run_argv(upd) : in_path(dracut[0]) ? run_argv(dracut) : -ENOENT;
	if (rc == -ENOENT) {
		/* No initramfs tooling: the system boots without one, the kernel and mdadm.conf do. */
		if (verbose)
			printf("no update-initramfs or dracut here: no initramfs to rebuild\n");
		return EXIT_OK;
	}
	if (rc) {
		cli_err("persist: rebuilding the initramfs failed (exit %d); run update-initramfs -u or "
			"dracut -f yourself", rc);
		return EXIT_FAIL;
	}
	if (verbose)
		printf("rebuilt the initramfs, so that the arrays assemble at boot under these names\n");
	return EXIT_OK;
}
