/* ckpt-demo: a training run simulated in host memory, checkpointed with libckpt.
 *
 * The model is a few hundred MiB of named tensors: bf16 weights
 * ("model.layers.N.attn.q_proj.weight", ...) and their fp32 Adam moments ("optim.exp_avg.<param>",
 * "optim.exp_avg_sq.<param>"). Every step updates a fraction of the parameters (and their
 * moments), chosen by a deterministic PRNG. Every few steps a checkpoint is saved in the
 * background: training blocks only for the snapshot, and only the chunks that changed are
 * written. At the end the latest checkpoint is restored and compared with the model in memory,
 * `ckptctl list` shows the store, and two commands to try next end the output. Exit status 0 when the restored state equals the model,
 * 1 otherwise. */
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"

struct tensor {
	char name[128];
	ckpt_dtype dtype;
	unsigned ndim;
	uint64_t shape[2];
	uint64_t nbytes;
	uint8_t *data;
	int param; /* index of the parameter it belongs to (moments share their weight's) */
};

struct model {
	struct tensor *t;
	size_t n, cap;
	int nparams;
	uint64_t bytes;
};

static uint64_t rng_state;

static uint64_t rng(void)
{
	/* xorshift64*: fast, deterministic, good enough to make every chunk distinct. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

static void fill(uint8_t *p, uint64_t n)
{
	uint64_t k = 0;
	for (; k + 8 <= n; k += 8) {
		uint64_t v = rng();
		memcpy(p + k, &v, 8);
	}
	if (k < n) {
		uint64_t v = rng();
		memcpy(p + k, &v, n - k);
	}
}

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *iec(uint64_t b, char *buf, size_t len)
{
	static const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int i = 0;
	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
	return buf;
}

static void add(struct model *m, int param, ckpt_dtype dt, uint64_t d0, uint64_t d1,
		const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void add(struct model *m, int param, ckpt_dtype dt, uint64_t d0, uint64_t d1,
		const char *fmt, ...)
{
	if (m->n == m->cap) {
		m->cap = m->cap ? m->cap * 2 : 64;
		m->t = realloc(m->t, m->cap * sizeof *m->t);
		if (!m->t) {
			fprintf(stderr, "ckpt-demo: out of memory\n");
			exit(1);
		}
	}
	struct tensor *t = &m->t[m->n++];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->name, sizeof t->name, fmt, ap);
	va_end(ap);
	t->dtype = dt;
	t->shape[0] = d0;
	t->shape[1] = d1;
	t->ndim = d1 ? 2 : 1;
	t->nbytes = d0 * (d1 ? d1 : 1) * ckpt_dtype_size(dt);
	t->param = param;
	m->bytes += t->nbytes;
}

/* A weight and its two Adam moments. */
static void add_param(struct model *m, ckpt_dtype dt, uint64_t d0, uint64_t d1, const char *name)
{
	int p = m->nparams++;
	add(m, p, dt, d0, d1, "%s", name);
	add(m, p, CKPT_DTYPE_F32, d0, d1, "optim.exp_avg.%s", name);
	add(m, p, CKPT_DTYPE_F32, d0, d1, "optim.exp_avg_sq.%s", name);
}

/* A llama-shaped model of about size bytes (weights and moments). */
static void build_model(struct model *m, uint64_t size)
{
	uint64_t h = 2048, vocab = 8192, per_layer, fixed;
	/* Bytes per parameter: 2 (bf16) + 8 (two fp32 moments). The widest model that still has
	 * 8 layers; each layer is 16 h^2 parameters (attention 4 h^2, MLP 12 h^2). */
	for (;;) {
		per_layer = 16 * h * h * 10 + h * 2 * 12;
		fixed = 2 * vocab * h * 10;
		if (h <= 64 || fixed + 8 * per_layer <= size)
			break;
		h /= 2;
	}
	uint64_t layers = size > fixed + per_layer ? (size - fixed) / per_layer : 1;
	char n[128];

	add_param(m, CKPT_DTYPE_BF16, vocab, h, "model.embed_tokens.weight");
	for (uint64_t l = 0; l < layers; l++) {
		static const char *attn[] = {"q_proj", "k_proj", "v_proj", "o_proj"};
		for (int k = 0; k < 4; k++) {
			snprintf(n, sizeof n, "model.layers.%llu.attn.%s.weight",
				 (unsigned long long)l, attn[k]);
			add_param(m, CKPT_DTYPE_BF16, h, h, n);
		}
		snprintf(n, sizeof n, "model.layers.%llu.mlp.gate_proj.weight", (unsigned long long)l);
		add_param(m, CKPT_DTYPE_BF16, 4 * h, h, n);
		snprintf(n, sizeof n, "model.layers.%llu.mlp.up_proj.weight", (unsigned long long)l);
		add_param(m, CKPT_DTYPE_BF16, 4 * h, h, n);
		snprintf(n, sizeof n, "model.layers.%llu.mlp.down_proj.weight", (unsigned long long)l);
		add_param(m, CKPT_DTYPE_BF16, h, 4 * h, n);
		snprintf(n, sizeof n, "model.layers.%llu.input_layernorm.weight",
			 (unsigned long long)l);
		add_param(m, CKPT_DTYPE_F32, h, 0, n);
		snprintf(n, sizeof n, "model.layers.%llu.post_attention_layernorm.weight",
			 (unsigned long long)l);
		add_param(m, CKPT_DTYPE_F32, h, 0, n);
	}
	add_param(m, CKPT_DTYPE_F32, h, 0, "model.norm.weight");
	add_param(m, CKPT_DTYPE_BF16, vocab, h, "lm_head.weight");
	for (size_t k = 0; k < m->n; k++) {
		m->t[k].data = malloc(m->t[k].nbytes ? m->t[k].nbytes : 1);
		if (!m->t[k].data) {
			fprintf(stderr, "ckpt-demo: out of memory for %s\n", m->t[k].name);
			exit(1);
		}
		fill(m->t[k].data, m->t[k].nbytes);
	}
}

/* One optimizer step: a fraction of the parameters change, with their moments. */
static void train_step(struct model *m, double fraction)
{
	int want = (int)(m->nparams * fraction + 0.5);
	if (want < 1)
		want = 1;
	char *hit = calloc((size_t)m->nparams, 1);
	for (int k = 0; k < want; k++)
		hit[rng() % (uint64_t)m->nparams] = 1;
	for (size_t k = 0; k < m->n; k++)
		if (hit[m->t[k].param])
			fill(m->t[k].data, m->t[k].nbytes);
	free(hit);
}

static int fail(const char *what, int err)
{
	fprintf(stderr, "ckpt-demo: %s: %s\n", what, ckpt_errmsg()[0] ? ckpt_errmsg() :
		ckpt_strerror(err));
	return 1;
}

/* Waits for an in-flight save and prints its statistics. */
static int finish_save(ckpt_save *s, uint64_t step)
{
	ckpt_stats st = {.struct_size = sizeof st};
	char a[32], b[32];
	int r = ckpt_save_wait(s, &st);
	if (r < 0)
		return fail("save", r);
	printf("checkpoint step %3llu: %s logical, %10s new (%4llu of %llu chunks), %.2f s, "
	       "training blocked %.2f s, %.2f GiB/s [%s%s, %u threads]\n",
	       (unsigned long long)step, iec(st.logical_bytes, a, sizeof a),
	       iec(st.bytes_written, b, sizeof b), (unsigned long long)st.chunks_new,
	       (unsigned long long)st.chunks, st.seconds, st.snapshot_seconds,
	       st.seconds > 0 ? (double)st.logical_bytes / st.seconds / (1 << 30) : 0.0, st.engine,
	       st.direct_io ? ", O_DIRECT" : "", st.threads);
	fflush(stdout);
	return 0;
}

/* Starts the checkpoint of step in the background and returns once the snapshot is taken, when
 * training may modify the tensors again; the save persists while training goes on. */
static int start_save(ckpt_store *store, struct model *m, uint64_t step, ckpt_save **out)
{
	ckpt_save *s;
	char meta[32];
	int r = ckpt_save_begin(store, step, NULL, &s);
	if (r < 0)
		return fail("save_begin", r);
	for (size_t k = 0; k < m->n; k++) {
		struct tensor *t = &m->t[k];
		ckpt_tensor ct = {.struct_size = sizeof ct, .name = t->name, .dtype = t->dtype,
				  .ndim = t->ndim, .shape = t->shape, .mem = CKPT_MEM_HOST,
				  .data = t->data};
		r = ckpt_save_add(s, &ct);
		if (r < 0) {
			ckpt_save_abort(s);
			return fail("add_tensor", r);
		}
	}
	snprintf(meta, sizeof meta, "%llu", (unsigned long long)step);
	ckpt_save_set_meta(s, "step", meta);
	ckpt_save_set_meta(s, "producer", "ckpt-demo");
	if ((r = ckpt_save_submit(s)) < 0) {
		ckpt_save_abort(s);
		return fail("submit", r);
	}
	if ((r = ckpt_save_wait_snapshot(s)) < 0) {
		ckpt_save_wait(s, NULL);
		return fail("snapshot", r);
	}
	*out = s;
	return 0;
}

struct restore_ctx {
	struct model *m;
	uint8_t **dst;
	int mismatched_names;
};

/* Called from the library's worker threads: touches only its own index, counts atomically. */
static void *dst_for(size_t index, const ckpt_tensor_info *info, int *mem, void *arg)
{
	struct restore_ctx *c = arg;
	if (index >= c->m->n || strcmp(info->name, c->m->t[index].name) ||
	    info->nbytes != c->m->t[index].nbytes) {
		__atomic_fetch_add(&c->mismatched_names, 1, __ATOMIC_RELAXED);
		return NULL;
	}
	*mem = CKPT_MEM_HOST;
	return c->dst[index];
}

/* A word for a shell command line: as it is when plain, else in single quotes. */
static const char *shell_word(const char *s, char *buf, size_t len)
{
	if (*s && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
		  "_-+=.,/:@%") == strlen(s))
		return s;
	size_t o = 0;
	buf[o++] = '\'';
	for (; *s && o + 5 < len; s++) {
		if (*s == '\'') {
			memcpy(buf + o, "'\\''", 4);
			o += 4;
		} else {
			buf[o++] = *s;
		}
	}
	buf[o++] = '\'';
	buf[o] = 0;
	return buf;
}

/* The last lines: two commands to try next on the store, with the ckptctl beside this program
 * (named relative to the current directory when it is below it, as `make demo` runs it). */
static void print_next(const char *store, const char *bin)
{
	char cwd[PATH_MAX], q[2 * PATH_MAX];
	const char *prog = bin;
	size_t l = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
	if (l && !strncmp(bin, cwd, l) && bin[l] == '/')
		prog = bin + l + 1;
	char p[PATH_MAX + 16];
	snprintf(p, sizeof p, "%s", shell_word(prog, q, sizeof q));
	const char *st = shell_word(store, q, sizeof q);
	printf("\nNext, check every checkpoint, then export the model's weights for the Hugging Face "
	       "tools:\n  %s verify %s --all\n  %s export %s latest -o model.safetensors --select "
	       "model\n", p, st, p, st);
}

static void run_ckptctl_list(const char *store)
{
	char exe[PATH_MAX], bin[PATH_MAX + 16];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n < 0)
		return;
	exe[n] = 0;
	snprintf(bin, sizeof bin, "%s/ckptctl", dirname(exe));
	char q[2 * PATH_MAX];
	printf("\n$ ckptctl list %s\n", shell_word(store, q, sizeof q));
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execl(bin, "ckptctl", "list", store, (char *)NULL);
		fprintf(stderr, "ckpt-demo: cannot run %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
	print_next(store, bin);
}

static const char usage[] =
	"Usage: ckpt-demo [--store DIR] [--size SIZE] [--steps N] [--every N] [--fraction F]\n"
	"Simulates a training run in host memory and checkpoints it with libckpt.\n"
	"  --store DIR      the store (default ./demo-store; must not hold checkpoints of these steps)\n"
	"  --size SIZE      model size with optimizer state, in MiB or with K/M/G (default 384M)\n"
	"  --steps N        training steps (default 10)\n"
	"  --every N        checkpoint every N steps (default 2)\n"
	"  --fraction F     fraction of the parameters updated per step (default 0.1)\n";

static int parse_size(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || v <= 0)
		return -1;
	double mult = 1 << 20;
	switch (*end) {
	case 'k': case 'K': mult = 1 << 10; end++; break;
	case 'm': case 'M': mult = 1 << 20; end++; break;
	case 'g': case 'G': mult = 1 << 30; end++; break;
	default: break;
	}
	if (*end == 'i' && end[1] == 'B')
		end += 2;
	if (*end)
		return -1;
	*out = (uint64_t)(v * mult);
	return 0;
}

int main(int argc, char **argv)
{
	const char *store_path = "demo-store";
	uint64_t size = 384ull << 20;
	int steps = 10, every = 2, c;
	double fraction = 0.1;
	static const struct option opts[] = {
		{"store", required_argument, NULL, 'S'}, {"size", required_argument, NULL, 'z'},
		{"steps", required_argument, NULL, 'n'}, {"every", required_argument, NULL, 'e'},
		{"fraction", required_argument, NULL, 'f'}, {"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'S': store_path = optarg; break;
		case 'z':
			if (parse_size(optarg, &size)) {
				fprintf(stderr, "ckpt-demo: bad --size '%s'\n", optarg);
				return 2;
			}
			break;
		case 'n': steps = atoi(optarg); break;
		case 'e': every = atoi(optarg); break;
		case 'f': fraction = atof(optarg); break;
		case 'h': fputs(usage, stdout); return 0;
		default: fputs(usage, stderr); return 2;
		}
	}
	if (steps < 1 || every < 1 || fraction < 0 || fraction > 1) {
		fputs(usage, stderr);
		return 2;
	}

	char a[32];
	rng_state = 0x9E3779B97F4A7C15ULL;
	struct model m = {0};
	double t0 = now();
	build_model(&m, size);
	printf("libckpt %s demo: model of %zu tensors (%d parameters with Adam moments), %s, "
	       "built in %.2f s\n", ckpt_version(), m.n, m.nparams, iec(m.bytes, a, sizeof a),
	       now() - t0);
	printf("training %d steps, %.0f%% of the parameters updated per step, a checkpoint every "
	       "%d steps into %s\n\n", steps, fraction * 100, every, store_path);

	ckpt_options *o = ckpt_options_create();
	ckpt_options_set(o, CKPT_OPT_CREATE, 1);
	ckpt_store *store;
	int r = ckpt_store_open(store_path, o, &store);
	ckpt_options_free(o);
	if (r < 0)
		return fail("open store", r);

	double train = now();
	ckpt_save *inflight = NULL;
	uint64_t inflight_step = 0;
	for (int step = 1; step <= steps; step++) {
		train_step(&m, fraction);
		if (step % every && step != steps)
			continue;
		/* One save in flight at a time: the previous one is durable before the next starts. */
		if (inflight && finish_save(inflight, inflight_step)) {
			ckpt_store_close(store);
			return 1;
		}
		inflight = NULL;
		if (start_save(store, &m, (uint64_t)step, &inflight)) {
			ckpt_store_close(store);
			return 1;
		}
		inflight_step = (uint64_t)step;
	}
	if (inflight && finish_save(inflight, inflight_step)) {
		ckpt_store_close(store);
		return 1;
	}
	printf("training and checkpoints: %.2f s\n", now() - train);

	/* Restore the latest checkpoint into fresh memory and compare with the model. */
	ckpt_reader *rd;
	if ((r = ckpt_reader_open(store, CKPT_STEP_LATEST, 0, &rd)) < 0) {
		ckpt_store_close(store);
		return fail("reader_open", r);
	}
	ckpt_info info = {.struct_size = sizeof info};
	ckpt_reader_info(rd, &info);
	struct restore_ctx rc = {.m = &m, .dst = calloc(m.n, sizeof(uint8_t *))};
	for (size_t k = 0; k < m.n; k++) {
		rc.dst[k] = malloc(m.t[k].nbytes ? m.t[k].nbytes : 1);
		if (!rc.dst[k]) {
			fprintf(stderr, "ckpt-demo: out of memory\n");
			return 1;
		}
		memset(rc.dst[k], 0xA5, m.t[k].nbytes);
	}
	r = ckpt_reader_read_all(rd, dst_for, &rc);
	ckpt_stats st = {.struct_size = sizeof st};
	ckpt_reader_stats(rd, &st);
	bool ok = r == 0 && !rc.mismatched_names && ckpt_reader_tensor_count(rd) == m.n;
	if (r < 0)
		fail("restore", r);
	size_t bad = 0;
	for (size_t k = 0; ok && k < m.n; k++)
		if (memcmp(rc.dst[k], m.t[k].data, m.t[k].nbytes)) {
			if (bad++ < 5)
				fprintf(stderr, "ckpt-demo: restored %s differs from the model\n",
					m.t[k].name);
		}
	ok = ok && !bad;
	printf("\nrestore of step %llu: %s in %.2f s (%.2f GiB/s), every chunk digest checked: %s\n",
	       (unsigned long long)info.step, iec(st.logical_bytes, a, sizeof a), st.seconds,
	       st.seconds > 0 ? (double)st.logical_bytes / st.seconds / (1 << 30) : 0.0,
	       ok ? "PASS, identical to the model in memory" : "FAIL");
	if (rc.mismatched_names)
		fprintf(stderr, "ckpt-demo: %d tensors of the checkpoint do not match the model's "
			"names or sizes\n", rc.mismatched_names);
	ckpt_reader_close(rd);
	ckpt_store_close(store);
	for (size_t k = 0; k < m.n; k++) {
		free(rc.dst[k]);
		free(m.t[k].data);
	}
	free(rc.dst);
	free(m.t);

	run_ckptctl_list(store_path);
	return ok ? 0 : 1;
}
