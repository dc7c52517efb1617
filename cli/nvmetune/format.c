/* format: the LBA format of an NVMe namespace. 512-byte sectors are still the default of many
 * drives, while 4 KiB ones suit checkpoint writes (O_DIRECT aligned to 4 KiB, fewer and larger
 * commands). Reformatting erases the namespace, so it runs only with --force; plan shows the
 * step when a drive supports a better format than the one in use. */
#include "nvmetune.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <libnvme.h>

static const char *fmt_lba(const struct nvme_lba *l, unsigned i, char *buf, size_t len)
{
	uint32_t b = l->f[i].bytes;
	snprintf(buf, len, b % 1024 ? "%u B" : "%u KiB", b % 1024 ? b : b / 1024);
	if (l->f[i].ms)
		snprintf(buf + strlen(buf), len - strlen(buf), "+%u", l->f[i].ms);
	return buf;
}

/* The namespace of dev: its controller and namespace id. Returns 0 or EXIT_NOTFOUND. */
static int ns_of(const char *cmd, const char *dev, char *nm, size_t nlen, char *ctrl, size_t clen,
		 unsigned *nsid)
{
	char rel[PATH_MAX], v[32] = "";
	if (blk_resolve(dev, nm, nlen) || (nvme_ctrl_of(nm, ctrl, clen), !ctrl[0])) {
		cli_err("%s: %s: no such NVMe namespace", cmd, dev);
		return EXIT_NOTFOUND;
	}
	snprintf(rel, sizeof(rel), "block/%s/nsid", nm);
	*nsid = sys_read(rel, v, sizeof(v)) || !atoi(v) ? 1 : (unsigned)atoi(v);
	return 0;
}

static int do_format(const char *ctrl, unsigned nsid, unsigned lbaf)
{
	char p[PATH_MAX];
	dev_path(p, sizeof(p), ctrl);
	int fd = open(p, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		cli_err("format: %s: %s", p, strerror(e));
		return e == EACCES || e == EPERM ? EXIT_PERM : EXIT_FAIL;
	}
	__u32 result = 0;
	struct nvme_format_nvm_args a = {
		.result = &result, .args_size = sizeof(a), .fd = fd, .timeout = 600000, .nsid = nsid,
		.lbaf = (__u8)(lbaf & 0xf), .lbafu = (__u8)(lbaf >> 4),
	};
	int rc = nvme_format_nvm(&a);
	int e = errno;
	/* The kernel revalidates the namespace after a format; ask for it in case it did not. */
	if (!rc)
		nvme_ns_rescan(fd);
	close(fd);
	if (rc) {
		if (rc > 0)
			cli_err("format: %s: NVMe status 0x%x (%s)", p, rc, nvme_status_to_string(rc, false));
		else
			cli_err("format: %s: %s", p, strerror(e));
		return EXIT_FAIL;
	}
	return EXIT_OK;
}

struct format_args {
	uint64_t lbaf;
	bool dry, force;
};

static const struct cli_opt format_opts[] = {
	{CLI_OPT(CLI_U64, "lbaf", 0, CLI_AT(struct format_args, lbaf), "N", "the LBA format index"),
	 .max = 63, .bad = "bad --lbaf '%s': expected 0 to 63"},
	{CLI_OPT(CLI_FLAG, "dry-run", 'n', CLI_AT(struct format_args, dry), NULL,
		 "print what would be done")},
	{CLI_OPT(CLI_FLAG, "force", 'f', CLI_AT(struct format_args, force), NULL,
		 "erase and reformat")},
	CLI_OPT_END,
};

const struct cli_cmd nt_cmd_format = {
	.name = "format", .fn = cmd_format,
	.help = "reformat an NVMe namespace with a better LBA format (erases it; --force)",
	.args = "DEV", .opts = format_opts,
	.desc = "Reformats the NVMe namespace DEV with LBA format N (default: the best supported for\n"
		"checkpoints, 4 KiB without metadata when the drive has it; see 'nvmetune status').\n"
		"THIS ERASES EVERY BYTE OF THE NAMESPACE: without --force it is refused, and a mounted\n"
		"or held namespace is always refused.\n",
	.tail = "\n"
		"Exit status: 0 done (or already in that format), 1 failed, 2 usage, 4 no such namespace,\n"
		"6 refused (no --force, or mounted/held), 7 permission denied.\n",
};

int cmd_format(int argc, char **argv)
{
	/* lbaf stays UINT64_MAX (the table allows 0 to 63) unless --lbaf is given. */
	struct format_args opt = {.lbaf = UINT64_MAX};
	int c = cli_parse_opts(&nt_cmd_format, &opt, &argc, argv);
	if (c >= 0)
		return c;
	bool dry = opt.dry, force = opt.force;
	long want = opt.lbaf == UINT64_MAX ? -1 : (long)opt.lbaf;
	if (argc != 2)
		return cli_usage_err("format", "name one NVMe namespace");
	char nm[64], ctrl[64], dp[PATH_MAX], a[32], b[32], where[PATH_MAX];
	unsigned nsid;
	int rc = ns_of("format", argv[1], nm, sizeof(nm), ctrl, sizeof(ctrl), &nsid);
	if (rc)
		return rc;
	struct nvme_lba l;
	nvme_lba_query(ctrl, nsid, &l);
	if (!l.have) {
		cli_err("format: %s: cannot read the LBA formats: %s", nm, l.why);
		return strstr(l.why, "denied") ? EXIT_PERM : EXIT_FAIL;
	}
	unsigned to = want >= 0 ? (unsigned)want : l.best;
	if (to >= l.n) {
		cli_err("format: %s has LBA formats #0 to #%u, not #%u", nm, l.n - 1, to);
		return EXIT_USAGE;
	}
	dev_path(dp, sizeof(dp), nm);
	if (to == l.cur) {
		printf("%s is already formatted with %s (#%u): nothing to do\n", dp,
		       fmt_lba(&l, to, a, sizeof(a)), to);
		return EXIT_OK;
	}
	char msg[PATH_MAX + 128];
	snprintf(msg, sizeof(msg), "format %s (namespace %u of %s) from %s (#%u) to %s (#%u)", dp,
		 nsid, ctrl, fmt_lba(&l, l.cur, a, sizeof(a)), l.cur, fmt_lba(&l, to, b, sizeof(b)), to);
	if (dev_mounted(nm, where, sizeof(where))) {
		cli_err("format: %s: refused: mounted on %s (formatting erases it)", dp, where);
		return EXIT_REFUSED;
	}
	if (dry) {
		printf("would %s: this erases every byte of the namespace\n", msg);
		return EXIT_OK;
	}
	if (!force) {
		cli_err("format: refusing to %s: this erases every byte of the namespace (--force "
			"erases it)", msg);
		return EXIT_REFUSED;
	}
	if ((rc = nt_need_root("format")) || (rc = do_format(ctrl, nsid, to)))
		return rc;
	printf("formatted %s: %s sectors now (LBA format #%u)\n", dp, fmt_lba(&l, to, a, sizeof(a)),
	       to);
	return EXIT_OK;
}

void format_advice(struct jw *w, const struct plan *pl)
{
	if (w) {
		jw_key(w, "format_steps");
		jw_arr_begin(w);
	}
	for (int i = 0; i < pl->n; i++) {
		const char *d = pl->it[i].dev;
		char ctrl[64] = "", a[32], b[32];
		bool seen = false;
		for (int j = 0; j < i && !seen; j++)
			seen = !strcmp(pl->it[j].dev, d);
		if (seen || strncmp(d, "nvme", 4) || !strchr(d + 4, 'n'))
			continue;
		unsigned nsid;
		if (ns_of("plan", d, (char[64]){0}, 64, ctrl, sizeof(ctrl), &nsid))
			continue;
		struct nvme_lba l;
		nvme_lba_query(ctrl, nsid, &l);
		if (!l.have || l.best == l.cur)
			continue;
		if (w) {
			jw_obj_begin(w);
			jw_key(w, "dev"); jw_str(w, d);
			jw_key(w, "current_bytes"); jw_u64(w, l.f[l.cur].bytes);
			jw_key(w, "best_bytes"); jw_u64(w, l.f[l.best].bytes);
			jw_key(w, "lbaf"); jw_u64(w, l.best);
			jw_obj_end(w);
		} else {
			printf("%s: LBA format %s (#%u) in use, %s (#%u) supported: 'nvmetune format %s "
			       "--force' (erases the namespace)\n", d, fmt_lba(&l, l.cur, a, sizeof(a)),
			       l.cur, fmt_lba(&l, l.best, b, sizeof(b)), l.best, d);
		}
	}
	if (w)
		jw_arr_end(w);
}
