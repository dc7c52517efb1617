/* ckptctl show: one checkpoint's summary, metadata and tensors (dtype, shape, size, chunks new and
 * reused), as text or JSON. */
#include "ckptctl.h"
#include "safetensors.h"

#include <stdio.h>
#include <string.h>

struct show_args {
	bool json, all;
	const char *remote;
};

static const struct cli_opt show_opts[] = {
	{CLI_OPT(CLI_FLAG, "all", 0, CLI_AT(struct show_args, all), NULL,
	 "also the metadata left out otherwise: the Python binding's own\n"
	 "entries (libckpt.python, the saved structure, and libckpt.names),\n"
	 "a multi-rank checkpoint's internals (ckpt.dist.*), and large binary\n"
	 "or base64 values in full (such as DCP's dcp.metadata; else their size)")},
	CK_REMOTE_READ_OPT(struct show_args),
	{CLI_OPT(CLI_FLAG, "json", 0, CLI_AT(struct show_args, json), NULL,
	 "print a JSON object: step, time, tensors, logical_bytes, bytes_new,\n"
	 "stored_bytes, chunks, chunks_new, tags (an array of strings), metadata\n"
	 "(an object), metadata_hidden (an object: the byte size of each entry\n"
	 "left out as internal or large; without --all) and tensor_info (an\n"
	 "array of objects with name, dtype, shape, nbytes, chunks, chunks_new,\n"
	 "chunks_reused and bytes_new); sizes in bytes (new_bytes and\n"
	 "new_chunks: older names, printed too until the next version)")},
	CLI_OPT_END,
};

static int cmd_show(int argc, char **argv);

const struct cli_cmd ck_cmd_show = {
	.name = "show", .fn = cmd_show, .help = "show one checkpoint's metadata and tensors",
	.args = "STORE STEP", .opts = show_opts,
	.desc = "Show the checkpoint of STEP (a number or 'latest'): commit time, sizes, tags, metadata\n"
		"(the tags among it, as the reserved entry ckpt.tags), and every tensor with its dtype,\n"
		"shape, size, chunks, how many of them the checkpoint wrote (NEW) and how many it shares\n"
		"with earlier ones (REUSED). Sizes are in IEC units. The store is opened read-only: show\n"
		"works while a save runs.\n"
		"Names are dotted paths, as the Python binding writes a state dict's keys\n"
		"(model.fc1.weight); those of a checkpoint an older binding saved with escaped keys\n"
		"(model.fc1%2Eweight) are shown unescaped.\n"
		"Metadata meant for programs is left out unless --all: the Python binding's entries, a\n"
		"multi-rank checkpoint's ckpt.dist.* entries (the world size and the shards are shown\n"
		"below instead), and the values of large binary or base64 entries (their size is shown).\n"
		"A multi-rank checkpoint also shows its world size and a GLOBAL TENSORS table: each global\n"
		"tensor's shape and its shards (rank, box offsets and lengths, part file) or 'replicated'.\n",
	.tail = "\n"
		"Exit status: 0 shown; 1 failed (damaged manifest); 2 usage error; 4 no such store or step.\n"
		"\n"
		"Example:\n"
		"  ckptctl show /mnt/nvme/ckpt latest\n",
};

static const struct ck_pos show_pos = {2, 2, true, {"expected STORE and STEP", "expected STEP"}};

/* The metadata entries show prints: all of them with --all, else all but the binding's. */
static bool shown_meta(const char *key, bool all)
{
	return all || !ck_binding_meta(key);
}

/* Without --all, what show leaves out of the rest: a multi-rank checkpoint's own entries
 * (ckpt.dist.*: hundreds in a DCP checkpoint, shown as the world size and the shard tables),
 * and the values of large entries meant for programs (DCP's base64 dcp.metadata), shown by
 * size. */
enum { META_SHOWN, META_DIST, META_LARGE };
#define META_LARGE_LEN 256 /* a value longer than this that is not text is shown by size */

static bool looks_binary(const char *v)
{
	size_t n = strlen(v);
	if (n <= META_LARGE_LEN)
		return false;
	if (strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_\n") == n)
		return true; /* base64 (or hex): no word a person reads */
	for (const unsigned char *c = (const unsigned char *)v; *c; c++)
		if ((*c < ' ' && *c != '\n' && *c != '\t') || *c == 0x7f)
			return true;
	return false;
}

static int meta_kind(const char *key, const char *val, bool all)
{
	if (all)
		return META_SHOWN;
	if (!strncmp(key, "ckpt.dist.", 10))
		return META_DIST;
	return looks_binary(val) ? META_LARGE : META_SHOWN;
}

/* show --json: the field metadata_hidden (only when something was left out). */
static void show_json_hidden(struct jw *w, ckpt_reader *rd, bool all)
{
	size_t nm = ckpt_reader_meta_count(rd);
	bool any = false;
	for (size_t k = 0; k < nm; k++) {
		const char *key, *val;
		if (ckpt_reader_meta(rd, k, &key, &val) || !shown_meta(key, all) ||
		    meta_kind(key, val, all) == META_SHOWN)
			continue;
		if (!any) {
			jw_key(w, "metadata_hidden");
			jw_obj_begin(w);
		}
		any = true;
		jw_key(w, key);
		jw_u64(w, strlen(val));
	}
	if (any)
		jw_obj_end(w);
}

static void show_json(ckpt_store *store, ckpt_reader *rd, const ckpt_info *in,
		      const struct ck_names *names, bool all)
{
	struct jw w;
	jw_init(&w, stdout, true);
	jw_obj_begin(&w);
	ck_info_json(&w, in);
	jw_key(&w, "metadata");
	jw_obj_begin(&w);
	size_t nm = ckpt_reader_meta_count(rd);
	for (size_t k = 0; k < nm; k++) {
		const char *key, *val;
		if (ckpt_reader_meta(rd, k, &key, &val) || !shown_meta(key, all) ||
		    meta_kind(key, val, all) != META_SHOWN)
			continue;
		jw_key(&w, key);
		jw_str(&w, val);
	}
	jw_obj_end(&w);
	show_json_hidden(&w, rd, all);
	jw_key(&w, "tensor_info");
	jw_arr_begin(&w);
	size_t nt = ckpt_reader_tensor_count(rd);
	for (size_t k = 0; k < nt; k++) {
		ckpt_tensor_info t = {.struct_size = sizeof t};
		if (ckpt_reader_tensor(rd, k, &t))
			continue;
		jw_obj_begin(&w);
		jw_key(&w, "name"); jw_str(&w, names->name[k]);
		jw_key(&w, "dtype"); jw_str(&w, ckpt_dtype_name(t.dtype) ? ckpt_dtype_name(t.dtype) : "?");
		jw_key(&w, "shape");
		jw_arr_begin(&w);
		for (unsigned d = 0; d < t.ndim; d++)
			jw_u64(&w, t.shape[d]);
		jw_arr_end(&w);
		jw_key(&w, "nbytes"); jw_u64(&w, t.nbytes);
		jw_key(&w, "chunks"); jw_u64(&w, t.chunks);
		jw_key(&w, "chunks_new"); jw_u64(&w, t.chunks_new);
		jw_key(&w, "chunks_reused"); jw_u64(&w, t.chunks - t.chunks_new);
		jw_key(&w, "bytes_new"); jw_u64(&w, t.bytes_new);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	ck_dist_show_json(&w, store, in->step);
	jw_obj_end(&w);
	jw_finish(&w);
}

/* The metadata lines of the text form: the entries shown, then how many were left out. */
static void show_meta_text(ckpt_reader *rd, bool all)
{
	size_t nm = ckpt_reader_meta_count(rd), shown = 0, hidden = 0, dist = 0;
	for (size_t k = 0; k < nm; k++) {
		const char *key, *val;
		if (ckpt_reader_meta(rd, k, &key, &val))
			continue;
		if (!shown_meta(key, all))
			hidden++;
		else if (meta_kind(key, val, all) == META_DIST)
			dist++;
		else
			shown++;
	}
	printf("metadata:%s\n", shown ? "" : "   (none)");
	for (size_t k = 0; k < nm; k++) {
		const char *key, *val;
		char qk[1100], qv[1100];
		char sz[32];
		if (ckpt_reader_meta(rd, k, &key, &val) || !shown_meta(key, all))
			continue;
		int kind = meta_kind(key, val, all);
		if (kind == META_LARGE)
			printf("  %s = (%s of binary or base64 data: --all shows it)\n",
			       ck_name(key, qk, sizeof qk), cli_fmt_iec(strlen(val), sz, sizeof sz));
		else if (kind == META_SHOWN)
			printf("  %s = %s\n", ck_name(key, qk, sizeof qk),
			       st_quote(val, qv, sizeof qv, 1000));
	}
	if (dist)
		printf("  (and %zu multi-rank entr%s, ckpt.dist.*: --all shows %s)\n", dist,
		       dist == 1 ? "y" : "ies", dist == 1 ? "it" : "them");
	if (hidden)
		printf("  (and %zu entr%s of the Python binding: --all shows %s)\n", hidden,
		       hidden == 1 ? "y" : "ies", hidden == 1 ? "it" : "them");
}

static void show_text(ckpt_store *store, ckpt_reader *rd, const ckpt_info *in,
		      const struct ck_names *names, bool all)
{
	char t[32], a[32], b[32], c[32];
	printf("step:       %llu\n", (unsigned long long)in->step);
	printf("time:       %s UTC\n", cli_fmt_time(in->time, t, sizeof t));
	printf("tensors:    %llu\n", (unsigned long long)in->tensors);
	printf("logical:    %s\n", cli_fmt_iec(in->logical_bytes, a, sizeof a));
	printf("new:        %s\n", cli_fmt_iec(in->new_bytes, b, sizeof b));
	printf("referenced: %s\n", cli_fmt_iec(in->stored_bytes, c, sizeof c));
	printf("chunks:     %llu (%llu new, %llu reused)\n", (unsigned long long)in->chunks,
	       (unsigned long long)in->new_chunks,
	       (unsigned long long)(in->chunks - in->new_chunks));
	printf("tags:       %s\n", *in->tags ? in->tags : "(none)");
	show_meta_text(rd, all);
	printf("\n%-8s  %-16s  %10s  %7s  %7s  %7s  %s\n", "DTYPE", "SHAPE", "SIZE", "CHUNKS", "NEW",
	       "REUSED", "NAME");
	size_t nt = ckpt_reader_tensor_count(rd);
	for (size_t k = 0; k < nt; k++) {
		ckpt_tensor_info ti = {.struct_size = sizeof ti};
		char sh[700], sz[32], q[1100];
		if (ckpt_reader_tensor(rd, k, &ti))
			continue;
		const char *dt = ckpt_dtype_name(ti.dtype);
		printf("%-8s  %-16s  %10s  %7llu  %7llu  %7llu  %s\n", dt ? dt : "?",
		       ck_fmt_shape(ti.ndim, ti.shape, sh, sizeof sh),
		       cli_fmt_iec(ti.nbytes, sz, sizeof sz), (unsigned long long)ti.chunks,
		       (unsigned long long)ti.chunks_new,
		       (unsigned long long)(ti.chunks - ti.chunks_new),
		       ck_name(names->name[k], q, sizeof q));
	}
	ck_dist_show_text(store, in->step);
}

static int cmd_show(int argc, char **argv)
{
	const char *cmd = "show";
	struct show_args opt = {0};
	int rc = ck_parse(&ck_cmd_show, &opt, &argc, &argv, &show_pos);
	if (rc >= 0)
		return rc;
	bool json = opt.json;
	uint64_t step;
	if (ck_parse_step(cmd, argv[2], &step))
		return EXIT_USAGE;

	ckpt_store *store;
	rc = ck_open_store(cmd, argv[1], true, NULL, &store);
	if (rc)
		return rc;
	ckpt_reader *rd = NULL;
	ckpt_remote *rm;
	if (!opt.remote || !(rc = ck_set_remote(cmd, store, opt.remote, CKPT_REMOTE_READ, &rm)))
		rc = ck_open_reader(cmd, store, step, &rd);
	struct ck_names names = {0};
	if (!rc)
		rc = ck_names_load(cmd, rd, &names);
	if (!rc) {
		ckpt_info info = {.struct_size = sizeof info};
		ckpt_reader_info(rd, &info);
		if (json)
			show_json(store, rd, &info, &names, opt.all);
		else
			show_text(store, rd, &info, &names, opt.all);
		rc = ck_stdout_done(cmd);
	}
	ck_names_free(&names);
	ckpt_reader_close(rd);
	ckpt_store_close(store);
	return rc;
}
