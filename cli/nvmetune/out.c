/* out: the one output layer of nvmetune's commands, over cli/common's JSON writer. A command
 * prints text, or with --json one JSON document; these helpers open and close that document and
 * write the values a reading may lack (null in JSON), so that every command says "unknown" the
 * same way. */
#include "nvmetune.h"

struct jw *out_begin(struct jw *w)
{
	if (!nt.json)
		return NULL;
	jw_init(w, stdout, true);
	jw_obj_begin(w);
	return w;
}

void out_end(struct jw *w)
{
	if (!w)
		return;
	jw_obj_end(w);
	jw_finish(w);
}

bool out_key(struct jw *w, const char *key, bool have)
{
	jw_key(w, key);
	if (!have)
		jw_null(w);
	return have;
}

void out_str(struct jw *w, const char *key, const char *s)
{
	if (out_key(w, key, s != NULL))
		jw_str(w, s);
}

void out_strs(struct jw *w, const struct out_kv *f, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out_str(w, f[i].key, f[i].v);
}

void out_u64s(struct jw *w, const struct out_u64 *f, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		jw_key(w, f[i].key);
		jw_u64(w, f[i].v);
	}
}
