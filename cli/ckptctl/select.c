/* export --select: one subtree of a state dict saved by the Python binding, as the file that
 * load_state_dict() and the Hugging Face tools expect. The binding names a tensor by the dotted
 * path of its keys, each key escaped ('%' as %25, '.' as %2E, NUL as %00: python/libckpt/_tree.py),
 * and records the structure in the metadata entry "libckpt.python". */
#include "ckptctl.h"
#include "safetensors.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BINDING_META "libckpt.python"

/* Unescapes one dotted name in a single pass (so that "%252E" gives "%2E", not "."). Returns a
 * malloc'd string, or NULL when out of memory or when a key holds NUL (*nul set then). */
static char *unescape_name(const char *s, bool *nul)
{
	char *out = malloc(strlen(s) + 1), *o = out;
	if (!out)
		return NULL;
	for (; *s; s++) {
		if (s[0] == '%' && s[1] == '2' && (s[2] == '5' || s[2] == 'E')) {
			*o++ = s[2] == '5' ? '%' : '.';
			s += 2;
		} else if (s[0] == '%' && s[1] == '0' && s[2] == '0') {
			*nul = true;
			free(out);
			return NULL;
		} else {
			*o++ = *s;
		}
	}
	*o = 0;
	return out;
}

/* The first component of each name, for the message naming what --select could be. */
static void top_level(const struct st_out_tensor *ts, size_t nt, char *buf, size_t len)
{
	size_t shown = 0;
	buf[0] = 0;
	for (size_t k = 0; k < nt && shown < 8; k++) {
		size_t n = strcspn(ts[k].name, ".");
		bool seen = false;
		for (size_t j = 0; j < k && !seen; j++)
			seen = !strncmp(ts[j].name, ts[k].name, n) && strcspn(ts[j].name, ".") == n;
		if (seen || strlen(buf) + n + 8 > len)
			continue;
		if (shown++)
			strcat(buf, ", ");
		strncat(buf, ts[k].name, n);
	}
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Two tensors that end up with one name ("a%2Eb" and "a" > "b" both give "a.b"). */
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
			cli_err("%s: --select: two tensors would both be named %s once unescaped", cmd,
				st_quote(v[k], q, sizeof q, 1000));
			rc = EXIT_FAIL;
		}
	free(v);
	return rc;
}

int ck_select(const char *cmd, const char *subtree, struct st_out_tensor *ts, size_t *ridx,
	      size_t *nt, char ***names)
{
	size_t pl = strlen(subtree), n = 0;
	char **nv = calloc(*nt + 1, sizeof *nv);
	if (!nv) {
		cli_err("%s: out of memory", cmd);
		return EXIT_FAIL;
	}
	*names = nv;
	for (size_t k = 0; k < *nt; k++) {
		if (strncmp(ts[k].name, subtree, pl) || ts[k].name[pl] != '.' || !ts[k].name[pl + 1])
			continue;
		bool nul = false;
		char q[1100];
		if (!(nv[n] = unescape_name(ts[k].name + pl + 1, &nul))) {
			if (nul)
				cli_err("%s: --select: tensor %s has a key holding NUL, which safetensors "
					"names cannot", cmd, st_quote(ts[k].name, q, sizeof q, 1000));
			else
				cli_err("%s: out of memory", cmd);
			return EXIT_FAIL;
		}
		ts[n] = ts[k];
		ts[n].name = nv[n];
		ridx[n++] = ridx[k];
	}
	if (!n) {
		char have[512], q[1100];
		top_level(ts, *nt, have, sizeof have);
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
		if (strcmp(keys[k], BINDING_META)) {
			keys[n] = keys[k];
			vals[n++] = vals[k];
		}
	return n;
}
