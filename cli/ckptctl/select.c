/* The Python binding's tensor names and metadata (docs/format.md, "Tensor names of the Python
 * binding"): show, diff and export show and match dotted names, and export --select writes one
 * subtree as the file that load_state_dict() and the Hugging Face tools expect. The binding names
 * a tensor by its keys joined by '.' ("model.fc1.weight") and records the structure in the
 * metadata entry "libckpt.python", with "libckpt.names" = "dotted". A checkpoint with the first
 * entry and without the second was saved by an older binding, which escaped '%' as %25 and '.'
 * as %2E inside a key ("model.fc1%2Eweight"): its names are shown and matched unescaped. */
#include "ckptctl.h"
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BINDING_META "libckpt.python"
#define BINDING_NAMES "libckpt.names"

bool ck_names_escaped(const ckpt_reader *rd)
{
	return ckpt_reader_get_meta(rd, BINDING_META) && !ckpt_reader_get_meta(rd, BINDING_NAMES);
}

char *ck_dotted(const char *s, bool escaped)
{
	char *out = malloc(strlen(s) + 1), *o = out;
	if (!out)
		return NULL;
	/* One pass, so that "%252E" gives "%2E", not "."; %00 (a NUL in a key) stays as it is. */
	for (; *s; s++) {
		if (escaped && s[0] == '%' && s[1] == '2' && (s[2] == '5' || s[2] == 'E')) {
			*o++ = s[2] == '5' ? '%' : '.';
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
	return out;
}

bool ck_binding_meta(const char *key)
{
	return !strcmp(key, BINDING_META) || !strcmp(key, BINDING_NAMES);
}

static const struct ck_names *sort_names; /* qsort has no argument: the table being sorted */

static int by_dotted(const void *a, const void *b)
{
	size_t i = *(const size_t *)a, j = *(const size_t *)b;
	int c = strcmp(sort_names->name[i], sort_names->name[j]);
	return c ? c : (i > j) - (i < j);
}

int ck_names_load(const char *cmd, const ckpt_reader *rd, struct ck_names *t)
{
	bool esc = ck_names_escaped(rd);
	*t = (struct ck_names){0};
	t->n = ckpt_reader_tensor_count(rd);
	t->name = calloc(t->n + 1, sizeof *t->name);
	t->order = calloc(t->n + 1, sizeof *t->order);
	for (size_t k = 0; t->name && t->order && k < t->n; k++) {
		ckpt_tensor_info ti = {.struct_size = sizeof ti};
		int r = ckpt_reader_tensor(rd, k, &ti);
		if (r < 0) {
			ck_names_free(t);
			return ck_fail(cmd, r, "reading the tensor list");
		}
		if (!(t->name[k] = ck_dotted(ti.name, esc)))
			break;
		t->order[k] = k;
	}
	if (!t->name || !t->order || (t->n && !t->name[t->n - 1])) {
		ck_names_free(t);
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	sort_names = t;
	qsort(t->order, t->n, sizeof *t->order, by_dotted);
	return 0;
}

long ck_names_find(const struct ck_names *t, const char *name, size_t *count)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) { /* the first entry not below name */
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(t->name[t->order[mid]], name) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	size_t n = 0;
	while (lo + n < t->n && !strcmp(t->name[t->order[lo + n]], name))
		n++;
	if (count)
		*count = n;
	return n ? (long)t->order[lo] : -1;
}

void ck_names_free(struct ck_names *t)
{
	for (size_t k = 0; t->name && k < t->n; k++)
		free(t->name[k]);
	free(t->name);
	free(t->order);
	*t = (struct ck_names){0};
}

/* The first component of each dotted name, for the message naming what --select could be. */
static void top_level(const struct st_out_tensor *ts, size_t nt, bool escaped, char *buf,
		      size_t len)
{
	size_t shown = 0, made = 0;
	char **d = calloc(nt + 1, sizeof *d);
	buf[0] = 0;
	for (size_t k = 0; d && k < nt && shown < 8; k++) {
		if (!(d[k] = ck_dotted(ts[k].name, escaped)))
			break;
		made = k + 1;
		size_t n = strcspn(d[k], ".");
		bool seen = false;
		for (size_t j = 0; j < k && !seen; j++)
			seen = !strncmp(d[j], d[k], n) && strcspn(d[j], ".") == n;
		if (seen || strlen(buf) + n + 8 > len)
			continue;
		if (shown++)
			strcat(buf, ", ");
		strncat(buf, d[k], n);
	}
	for (size_t k = 0; k < made; k++)
		free(d[k]);
	free(d);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Two tensors that end up with one name in the file: two old names that read the same once
 * unescaped ("x%2Ey.z" and "x.y%2Ez" both give "x.y.z"). */
static int check_unique(const char *cmd, char **names, size_t n)
{
	char **v = malloc((n ? n : 1) * sizeof *v);
	if (!v) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	memcpy(v, names, n * sizeof *v);
	qsort(v, n, sizeof *v, by_name);
	int rc = 0;
	for (size_t k = 1; k < n && !rc; k++)
		if (!strcmp(v[k], v[k - 1])) {
			char q[1100];
			cli_err("%s: --select: two tensors would both be named %s in the file (names an "
				"older binding escaped, which read the same once unescaped)", cmd,
				st_quote(v[k], q, sizeof q, 1000));
			rc = EXIT_FAIL;
		}
	free(v);
	return rc;
}

int ck_select(const char *cmd, const char *subtree, bool escaped, struct st_out_tensor *ts,
	      size_t *ridx, size_t *nt, char ***names)
{
	size_t pl = strlen(subtree), n = 0;
	char **nv = calloc(*nt + 1, sizeof *nv);
	if (!nv) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	*names = nv;
	for (size_t k = 0; k < *nt; k++) {
		char *d = ck_dotted(ts[k].name, escaped);
		if (!d) {
			cli_err("%s: out of memory", cmd);
			return EXIT_FAIL;
		}
		/* Under subtree: its text then a dot, so "model.fc1" is not "model.fc10". */
		if (strncmp(d, subtree, pl) || d[pl] != '.' || !d[pl + 1]) {
			free(d);
			continue;
		}
		memmove(d, d + pl + 1, strlen(d + pl + 1) + 1);
		nv[n] = d;
		ts[n] = ts[k];
		ts[n].name = nv[n];
		ridx[n++] = ridx[k];
	}
	if (!n) {
		char have[512], q[1100];
		top_level(ts, *nt, escaped, have, sizeof have);
		cli_err("%s: --select: no tensor under %s (the top-level names are: %s)", cmd,
			st_quote(subtree, q, sizeof q, 1000), *nt ? have : "none");
		return EXIT_NOTFOUND;
	}
	*nt = n;
	return check_unique(cmd, nv, n);
}

size_t ck_drop_binding_meta(const char **keys, const char **vals, size_t nm)
{
	size_t n = 0;
	for (size_t k = 0; k < nm; k++)
		if (!ck_binding_meta(keys[k])) {
			keys[n] = keys[k];
			vals[n++] = vals[k];
		}
	return n;
}
