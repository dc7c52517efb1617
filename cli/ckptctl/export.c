/* ckptctl export: write a checkpoint as a safetensors file, atomically (temporary file, fsync,
 * rename, directory fsync), or to standard output. */
#include "ckptctl.h"
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct export_args {
	const char *out, *select;
	bool quiet, json, no_progress;
};

static const char *const select_words[] = {"model", "optim", NULL};

static const struct cli_opt export_opts[] = {
	{CLI_OPT(CLI_STRING, "output", 'o', CLI_AT(struct export_args, out), "FILE",
	 "the file to write (required); '-' writes to standard output"),
	 .flags = CLI_REQUIRED, .complete = "@file:safetensors"},
	{CLI_OPT(CLI_STRING, "select", 0, CLI_AT(struct export_args, select), "SUBTREE",
	 "only the tensors under SUBTREE of a state dict saved from\n"
	 "Python (such as 'model'), named relative to it with the keys\n"
	 "unescaped ('conv1.weight'), without the binding's metadata\n"
	 "entry: what load_state_dict() and Hugging Face tools take"),
	 .values = select_words},
	{CLI_OPT(CLI_FLAG, "quiet", 'q', CLI_AT(struct export_args, quiet), NULL,
	 "print nothing on success")},
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct export_args, json), NULL,
	 "print step, file, tensors and bytes as a JSON object (needs a\n"
	 "FILE, not '-')")},
	{CLI_OPT(CLI_FLAG, "no-progress", 0, CLI_AT(struct export_args, no_progress), NULL,
	 "no progress line (it is shown, tensor by tensor, only when\n"
	 "standard error is a terminal, and not with --quiet or --json)")},
	CLI_OPT_END,
};

static int cmd_export(int argc, char **argv);

const struct cli_cmd ck_cmd_export = {
	.name = "export", .fn = cmd_export, .help = "write a checkpoint as a safetensors file",
	.args = "STORE [STEP]", .opts = export_opts,
	.desc = "Write the checkpoint of STEP (a number or 'latest'; default latest) as a safetensors file:\n"
		"the tensors in the checkpoint's order with contiguous data, the checkpoint's metadata in\n"
		"\"__metadata__\". Every chunk is verified as it is read. FILE is written under a temporary\n"
		"name, synced and renamed: it is never left half-written.\n",
	.tail = "\n"
		"Exit status: 0 written; 1 failed (damaged data, I/O error); 2 usage error; 4 no such\n"
		"store or step.\n"
		"\n"
		"Example:\n"
		"  ckptctl export /mnt/nvme/ckpt latest -o model.safetensors --select model\n",
};

static const struct ck_pos export_pos = {1, 2, true, {"expected STORE"}};

/* The temporary file to remove if a signal ends the export. */
static char *tmp_path;

static void on_signal(int sig)
{
	if (tmp_path)
		unlink(tmp_path);
	signal(sig, SIG_DFL);
	raise(sig);
}

static int write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static int fsync_dir_of(const char *path)
{
	char *copy = strdup(path);
	if (!copy)
		return -1;
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	free(copy);
	if (fd < 0)
		return -1;
	int r = fsync(fd);
	close(fd);
	return r;
}

/* Writes header and every tensor into fd (already sized to size bytes) through a shared
 * mapping. Returns 0; -CKPT_E_UNSUPPORTED when the file cannot be mapped (nothing was written
 * then); 1 when unmapping failed (errno set); or the library's error (its message names the
 * store file: a pack that cannot be read is not the output's fault). */
static int restore_mapped(ckpt_reader *rd, int fd, const uint8_t *hdr, size_t hlen,
			  const struct st_out_tensor *ts, const size_t *ridx, size_t nt, uint64_t size,
			  struct progress *bar)
{
	uint8_t *map = mmap(NULL, (size_t)size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return -CKPT_E_UNSUPPORTED;
	memcpy(map, hdr, hlen);
	uint64_t off = hlen;
	int r = 0;
	for (size_t k = 0; k < nt && r == 0; k++) {
		if (ts[k].nbytes)
			r = ckpt_reader_restore(rd, ridx[k], CKPT_MEM_HOST, map + off, ts[k].nbytes);
		off += ts[k].nbytes;
		progress_update(bar, off - hlen);
	}
	if (munmap(map, (size_t)size) && r == 0)
		r = 1;
	return r;
}

static int cmd_export(int argc, char **argv)
{
	const char *cmd = "export";
	struct export_args opt = {0};
	int c = ck_parse(&ck_cmd_export, &opt, &argc, &argv, &export_pos);
	if (c >= 0)
		return c;
	const char *out = opt.out, *select = opt.select;
	bool quiet = opt.quiet, json = opt.json, no_progress = opt.no_progress;
	int npos = argc - 1;
	if (!out || !*out)
		return cli_usage_err(cmd, "-o FILE is required ('-' for standard output)");
	uint64_t step = CKPT_STEP_LATEST;
	if (npos == 2 && ck_parse_step(cmd, argv[2], &step))
		return EXIT_USAGE;
	bool to_stdout = !strcmp(out, "-");
	if (to_stdout && json)
		return cli_usage_err(cmd, "--json needs -o FILE: standard output carries the data");
	if (select && !*select)
		return cli_usage_err(cmd, "--select needs a SUBTREE such as 'model'");
	if (to_stdout && isatty(STDOUT_FILENO))
		return cli_usage_err(cmd, "refusing to write binary data to a terminal");

	int rc, r, fd = -1;
	ckpt_store *store = NULL;
	ckpt_reader *rd = NULL;
	struct st_out_tensor *ts = NULL;
	size_t *ridx = NULL, nsel = 0;
	char **sel_names = NULL;
	const char **keys = NULL, **vals = NULL;
	uint8_t *hdr = NULL, *buf = NULL;
	char tmp[4200], label[64];
	ckpt_info info;
	struct progress bar = {0};

	if ((rc = ck_open_store(cmd, argv[1], true, NULL, &store)))
		return rc;
	rc = EXIT_FAIL;
	r = ckpt_reader_open(store, step, &rd);
	if (r < 0) {
		char what[64];
		if (step == CKPT_STEP_LATEST)
			snprintf(what, sizeof what, "no checkpoint");
		else
			snprintf(what, sizeof what, "step %llu", (unsigned long long)step);
		rc = ck_fail(cmd, r, what);
		goto out;
	}
	ckpt_reader_info(rd, &info);
	size_t nt = ckpt_reader_tensor_count(rd), nm = ckpt_reader_meta_count(rd);
	ts = calloc(nt ? nt : 1, sizeof *ts);
	ridx = calloc(nt ? nt : 1, sizeof *ridx);
	keys = calloc(nm ? nm : 1, sizeof *keys);
	vals = calloc(nm ? nm : 1, sizeof *vals);
	if (!ts || !ridx || !keys || !vals) {
		cli_err("%s: out of memory", cmd);
		goto out;
	}
	uint64_t maxb = 0, total = 0;
	for (size_t k = 0; k < nt; k++) {
		ckpt_tensor_info ti;
		if ((r = ckpt_reader_tensor(rd, k, &ti)) < 0) {
			rc = ck_fail(cmd, r, "reading the tensor list");
			goto out;
		}
		if (!strcmp(ti.name, "__metadata__")) {
			cli_err("%s: step %llu has a tensor named \"__metadata__\", which safetensors "
				"reserves", cmd, (unsigned long long)info.step);
			goto out;
		}
		ts[k] = (struct st_out_tensor){ti.name, ti.dtype, ti.ndim, ti.shape, ti.nbytes};
		ridx[k] = k;
	}
	if (select) {
		nsel = nt;
		if ((rc = ck_select(cmd, select, ts, ridx, &nt, &sel_names)))
			goto out;
		rc = EXIT_FAIL;
	}
	for (size_t k = 0; k < nt; k++) {
		if (ts[k].nbytes > maxb)
			maxb = ts[k].nbytes;
		total += ts[k].nbytes;
	}
	for (size_t k = 0; k < nm; k++)
		if ((r = ckpt_reader_meta(rd, k, &keys[k], &vals[k])) < 0) {
			rc = ck_fail(cmd, r, "reading the metadata");
			goto out;
		}
	if (select)
		nm = ck_drop_binding_meta(keys, vals, nm);
	size_t hlen;
	hdr = st_build_header(ts, nt, keys, vals, nm, &hlen);
	if (!hdr) {
		cli_err("%s: cannot build the safetensors header (out of memory or unknown dtype)",
			cmd);
		goto out;
	}
	const char *dest = to_stdout ? "standard output" : tmp;
	snprintf(label, sizeof label, "export step %llu", (unsigned long long)info.step);
	progress_start(&bar, label, total, !quiet && !json && !no_progress);
	if (to_stdout)
		fd = STDOUT_FILENO;
	else {
		snprintf(tmp, sizeof tmp, "%s.tmp-%ld", out, (long)getpid());
		tmp_path = tmp;
		signal(SIGINT, on_signal);
		signal(SIGTERM, on_signal);
		signal(SIGHUP, on_signal);
		fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
		if (fd < 0) {
			tmp_path = NULL;
			cli_err("%s: cannot create %s: %s", cmd, tmp, strerror(errno));
			goto out;
		}
	}
	if (!to_stdout) {
		/* A file: reserve its blocks, map it and restore every tensor in place, so that no
		 * tensor is buffered in memory. Where the file system cannot reserve blocks, write
		 * through a buffer as for standard output. */
		int e = hlen + total > (uint64_t)SIZE_MAX ? EFBIG :
			posix_fallocate(fd, 0, (off_t)(hlen + total));
		if (e == 0) {
			r = restore_mapped(rd, fd, hdr, hlen, ts, ridx, nt, hlen + total, &bar);
			if (r == 0)
				goto written;
			if (r != -CKPT_E_UNSUPPORTED) {
				rc = r == 1 ? (cli_err("%s: munmap %s: %s", cmd, tmp, strerror(errno)),
					       EXIT_FAIL)
					    : ck_fail(cmd, r, "reading a tensor");
				goto out;
			}
		} else if (e != EOPNOTSUPP && e != EINVAL) {
			cli_err("%s: cannot allocate %llu bytes for %s: %s", cmd,
				(unsigned long long)(hlen + total), tmp, strerror(e));
			goto out;
		}
	}
	if (maxb > SIZE_MAX || (maxb && !(buf = malloc((size_t)maxb)))) {
		cli_err("%s: out of memory for a tensor of %llu bytes", cmd, (unsigned long long)maxb);
		goto out;
	}
	if (write_all(fd, hdr, hlen)) {
		cli_err("%s: write %s: %s", cmd, dest, strerror(errno));
		goto out;
	}
	uint64_t sent = 0;
	for (size_t k = 0; k < nt; k++) {
		if (!ts[k].nbytes)
			continue;
		progress_update(&bar, sent);
		sent += ts[k].nbytes;
		r = ckpt_reader_restore(rd, ridx[k], CKPT_MEM_HOST, buf, ts[k].nbytes);
		if (r < 0) {
			rc = ck_fail(cmd, r, "reading a tensor");
			goto out;
		}
		if (write_all(fd, buf, (size_t)ts[k].nbytes)) {
			cli_err("%s: write %s: %s", cmd, dest, strerror(errno));
			goto out;
		}
	}
written:
	progress_end(&bar);
	if (!to_stdout) {
		if (fsync(fd)) {
			cli_err("%s: fsync %s: %s", cmd, tmp, strerror(errno));
			goto out;
		}
		int cr = close(fd);
		fd = -1;
		if (cr) {
			cli_err("%s: close %s: %s", cmd, tmp, strerror(errno));
			goto out;
		}
		if (rename(tmp, out)) {
			cli_err("%s: rename %s to %s: %s", cmd, tmp, out, strerror(errno));
			goto out;
		}
		tmp_path = NULL;
		if (fsync_dir_of(out)) {
			cli_err("%s: fsync the directory of %s: %s", cmd, out, strerror(errno));
			goto out;
		}
		if (json) {
			struct jw w;
			jw_init(&w, stdout, true);
			jw_obj_begin(&w);
			jw_key(&w, "step"); jw_u64(&w, info.step);
			jw_key(&w, "file"); jw_str(&w, out);
			jw_key(&w, "select");
			if (select)
				jw_str(&w, select);
			else
				jw_null(&w);
			jw_key(&w, "tensors"); jw_u64(&w, nt);
			jw_key(&w, "tensor_bytes"); jw_u64(&w, total);
			jw_key(&w, "file_bytes"); jw_u64(&w, hlen + total);
			jw_obj_end(&w);
			jw_finish(&w);
		} else if (!quiet) {
			char a[32];
			printf("exported step %llu: %zu tensors, %s to %s\n",
			       (unsigned long long)info.step, nt, cli_fmt_iec(total, a, sizeof a),
			       out);
		}
	}
	rc = EXIT_OK;
out:
	progress_end(&bar);
	if (fd >= 0 && fd != STDOUT_FILENO)
		close(fd);
	if (tmp_path) {
		unlink(tmp_path);
		tmp_path = NULL;
	}
	free(buf);
	free(hdr);
	for (size_t k = 0; sel_names && k < nsel; k++)
		free(sel_names[k]);
	free(sel_names);
	free(ridx);
	free(ts);
	free(keys);
	free(vals);
	ckpt_reader_close(rd);
	ckpt_store_close(store);
	return rc;
}
