/* A small streaming JSON writer: enough for --json output, with RFC 8259 escaping. */
#include "cli.h"

#include <math.h>
#include <string.h>

void json_put_string(FILE *f, const char *s, size_t n)
{
	fputc('"', f);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		switch (c) {
		case '"': fputs("\\\"", f); break;
		case '\\': fputs("\\\\", f); break;
		case '\n': fputs("\\n", f); break;
		case '\r': fputs("\\r", f); break;
		case '\t': fputs("\\t", f); break;
		case '\b': fputs("\\b", f); break;
		case '\f': fputs("\\f", f); break;
		default:
			if (c < 0x20 || c == 0x7f)
				fprintf(f, "\\u%04x", c);
			else
				fputc(c, f);
		}
	}
	fputc('"', f);
}

void jw_init(struct jw *w, FILE *f, bool pretty)
{
	w->f = f;
	w->depth = 0;
	w->need_comma[0] = false;
	w->after_key = false;
	w->pretty = pretty;
}

static void indent(struct jw *w)
{
	if (!w->pretty)
		return;
	fputc('\n', w->f);
	for (int i = 0; i < w->depth; i++)
		fputs("  ", w->f);
}

/* Called before every value or key: emits the separator the position needs. */
static void pre_value(struct jw *w)
{
	if (w->after_key) {
		w->after_key = false;
		return;
	}
	if (w->need_comma[w->depth])
		fputc(',', w->f);
	if (w->depth > 0)
		indent(w);
	w->need_comma[w->depth] = true;
}

static void open_(struct jw *w, char c)
{
	pre_value(w);
	fputc(c, w->f);
	if (w->depth < 31)
		w->depth++;
	w->need_comma[w->depth] = false;
}

static void close_(struct jw *w, char c)
{
	bool had = w->need_comma[w->depth];
	if (w->depth > 0)
		w->depth--;
	if (had)
		indent(w);
	fputc(c, w->f);
}

void jw_obj_begin(struct jw *w) { open_(w, '{'); }
void jw_obj_end(struct jw *w) { close_(w, '}'); }
void jw_arr_begin(struct jw *w) { open_(w, '['); }
void jw_arr_end(struct jw *w) { close_(w, ']'); }

void jw_key(struct jw *w, const char *k)
{
	pre_value(w);
	json_put_string(w->f, k, strlen(k));
	fputs(w->pretty ? ": " : ":", w->f);
	w->after_key = true;
}

void jw_strn(struct jw *w, const char *s, size_t n)
{
	pre_value(w);
	json_put_string(w->f, s, n);
}

void jw_str(struct jw *w, const char *s)
{
	if (!s) {
		jw_null(w);
		return;
	}
	jw_strn(w, s, strlen(s));
}

void jw_u64(struct jw *w, uint64_t v)
{
	pre_value(w);
	fprintf(w->f, "%llu", (unsigned long long)v);
}

void jw_i64(struct jw *w, int64_t v)
{
	pre_value(w);
	fprintf(w->f, "%lld", (long long)v);
}

void jw_dbl(struct jw *w, double v)
{
	pre_value(w);
	if (!isfinite(v))
		fputs("null", w->f);
	else
		fprintf(w->f, "%.6g", v);
}

void jw_bool(struct jw *w, bool v)
{
	pre_value(w);
	fputs(v ? "true" : "false", w->f);
}

void jw_null(struct jw *w)
{
	pre_value(w);
	fputs("null", w->f);
}

void jw_finish(struct jw *w)
{
	fputc('\n', w->f);
	fflush(w->f);
}
