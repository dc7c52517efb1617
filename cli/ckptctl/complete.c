/* Completion from the store a command line names (`ckptctl __complete CMD OPTION ARG...`, asked by
 * tools/completion/ckptctl): the subtrees of a checkpoint's dotted names for export --select, the
 * tags of a store for --tag and --keep-tag. Silent: a store that cannot be read completes nothing. */
#include "ckptctl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Opens the store the positional arguments argv[0..argc) begin with (CKPT_STORE when they do not
 * begin with a directory), read-only and without a word on stderr; *rest: the index of the
 * argument after STORE. Returns NULL when there is none or it cannot be opened. */
static ckpt_store *open_quiet(int argc, char **argv, int *rest)
{
	struct stat st;
	const char *path = NULL;
	*rest = 0;
	if (argc > 0 && !stat(argv[0], &st) && S_ISDIR(st.st_mode)) {
		path = argv[0];
		*rest = 1;
	} else {
		path = getenv("CKPT_STORE");
	}
	ckpt_options *o = ckpt_options_create();
	ckpt_store *s = NULL;
	if (o && path && *path && !ckpt_options_set(o, CKPT_OPT_READ_ONLY, 1) &&
	    ckpt_store_open(path, o, &s) < 0)
		s = NULL;
	ckpt_options_free(o);
	return s;
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Prints words[0..n) sorted, each once, and frees them. */
static void print_unique(char **words, size_t n)
{
	qsort(words, n, sizeof *words, by_str);
	for (size_t k = 0; k < n; k++)
		if (!k || strcmp(words[k], words[k - 1]))
			printf("%s\n", words[k]);
	for (size_t k = 0; k < n; k++)
		free(words[k]);
	free(words);
}

/* Appends to words every subtree of dotted name d (each prefix that a dot ends: "model",
 * "model.layers" and "model.layers.0" of "model.layers.0.weight"). Returns the new count. */
static size_t add_subtrees(char **words, size_t n, size_t cap, const char *d)
{
	for (const char *p = strchr(d, '.'); p && n < cap; p = strchr(p + 1, '.'))
		if (p > d && (words[n] = strndup(d, (size_t)(p - d))))
			n++;
	return n;
}

void ck_complete_select(int argc, char **argv)
{
	int rest;
	uint64_t step = CKPT_STEP_LATEST;
	ckpt_store *s = open_quiet(argc, argv, &rest);
	ckpt_reader *rd = NULL;
	if (!s)
		return;
	if (rest < argc && strcmp(argv[rest], "latest") && cli_parse_u64(argv[rest], &step))
		step = CKPT_STEP_LATEST;
	if (!ckpt_reader_open(s, step, CKPT_READ_AS_SAVED, &rd)) {
		bool esc = ck_names_escaped(rd);
		size_t nt = ckpt_reader_tensor_count(rd), n = 0, cap = 0;
		for (size_t k = 0; k < nt; k++) {
			ckpt_tensor_info t = {.struct_size = sizeof t};
			if (!ckpt_reader_tensor(rd, k, &t))
				cap += strlen(t.name); /* at least its dotted name's dots */
		}
		char **words = calloc(cap + 1, sizeof *words);
		for (size_t k = 0; words && k < nt; k++) {
			ckpt_tensor_info t = {.struct_size = sizeof t};
			char *d = ckpt_reader_tensor(rd, k, &t) ? NULL : ck_dotted(t.name, esc);
			if (d)
				n = add_subtrees(words, n, cap, d);
			free(d);
		}
		if (words)
			print_unique(words, n);
		ckpt_reader_close(rd);
	}
	ckpt_store_close(s);
}

void ck_complete_tags(int argc, char **argv)
{
	int rest;
	ckpt_store *s = open_quiet(argc, argv, &rest);
	ckpt_info *list = NULL;
	int n = s ? ckpt_store_list(s, 0, &list) : -1;
	size_t cap = 0, nw = 0;
	for (int k = 0; k < n; k++)
		cap += tags_in(list[k].tags);
	char **words = n > 0 ? calloc(cap + 1, sizeof *words) : NULL;
	for (int k = 0; words && k < n; k++)
		for (const char *p = list[k].tags; *p;) {
			size_t len = strcspn(p, ",");
			if ((words[nw] = strndup(p, len)))
				nw++;
			p += len + (p[len] == ',');
		}
	if (words)
		print_unique(words, nw);
	ckpt_info_free(list);
	ckpt_store_close(s);
}
