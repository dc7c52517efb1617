/* The state file: the values apply replaced, so that rollback can restore them exactly. JSON
 * written through the shared jw_* writer and read back by the small parser below (the file is ours,
 * but a hand edit must give a clear error, never a crash). Written atomically, and before any knob
 * changes, so that an interrupted apply can still be rolled back. */
#include "nvmetune.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- a minimal JSON reader: objects, arrays, strings, numbers, literals ---- */
struct jv {
	enum { JV_NULL, JV_BOOL, JV_NUM, JV_STR, JV_ARR, JV_OBJ } t;
	double num;
	char *str;
	char **keys;
	struct jv *kids;
	int n;
};

static void jv_free(struct jv *v)
{
	free(v->str);
	for (int i = 0; i < v->n; i++) {
		if (v->keys)
			free(v->keys[i]);
		jv_free(&v->kids[i]);
	}
	free(v->keys);
	free(v->kids);
	memset(v, 0, sizeof(*v));
}

static void ws(const char **p)
{
	while (isspace((unsigned char)**p))
		(*p)++;
}

static int parse_value(const char **p, struct jv *v, int depth);

static int parse_string(const char **p, char **out)
{
	if (**p != '"')
		return -1;
	(*p)++;
	size_t cap = 64, n = 0;
	char *s = malloc(cap);
	if (!s)
		return -1;
	while (**p && **p != '"') {
		char c = *(*p)++;
		if (c == '\\') {
			c = *(*p)++;
			switch (c) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'u': {
				unsigned u;
				if (sscanf(*p, "%4x", &u) != 1 || u > 0x7f) {
					free(s);
					return -1; /* the tool only writes ASCII */
				}
				*p += 4;
				c = (char)u;
				break;
			}
			case '"': case '\\': case '/': break;
			default: free(s); return -1;
			}
		}
		if (n + 2 > cap) {
			char *ns = realloc(s, cap *= 2);
			if (!ns) {
				free(s);
				return -1;
			}
			s = ns;
		}
		s[n++] = c;
	}
	if (**p != '"') {
		free(s);
		return -1;
	}
	(*p)++;
	s[n] = 0;
	*out = s;
	return 0;
}

static int push(struct jv *v, char *key, struct jv *kid)
{
	struct jv *nk = realloc(v->kids, (size_t)(v->n + 1) * sizeof(*nk));
	if (!nk)
		return -1;
	v->kids = nk;
	if (v->t == JV_OBJ) {
		char **kk = realloc(v->keys, (size_t)(v->n + 1) * sizeof(*kk));
		if (!kk)
			return -1;
		v->keys = kk;
		v->keys[v->n] = key;
	}
	v->kids[v->n++] = *kid;
	return 0;
}

static int parse_value(const char **p, struct jv *v, int depth)
{
	memset(v, 0, sizeof(*v));
	if (depth > 16)
		return -1;
	ws(p);
	if (**p == '{' || **p == '[') {
		bool obj = **p == '{';
		char close = obj ? '}' : ']';
		v->t = obj ? JV_OBJ : JV_ARR;
		(*p)++;
		ws(p);
		if (**p == close) {
			(*p)++;
			return 0;
		}
		for (;;) {
			char *key = NULL;
			ws(p);
			if (obj) {
				if (parse_string(p, &key))
					return -1;
				ws(p);
				if (**p != ':') {
					free(key);
					return -1;
				}
				(*p)++;
			}
			struct jv kid;
			if (parse_value(p, &kid, depth + 1) || push(v, key, &kid)) {
				free(key);
				jv_free(&kid);
				return -1;
			}
			ws(p);
			if (**p == ',') {
				(*p)++;
				continue;
			}
			if (**p == close) {
				(*p)++;
				return 0;
			}
			return -1;
		}
	}
	if (**p == '"') {
		v->t = JV_STR;
		return parse_string(p, &v->str);
	}
	if (!strncmp(*p, "true", 4) || !strncmp(*p, "null", 4)) {
		v->t = **p == 't' ? JV_BOOL : JV_NULL;
		v->num = **p == 't';
		*p += 4;
		return 0;
	}
	if (!strncmp(*p, "false", 5)) {
		v->t = JV_BOOL;
		*p += 5;
		return 0;
	}
	char *end;
	v->num = strtod(*p, &end);
	if (end == *p)
		return -1;
	v->t = JV_NUM;
	*p = end;
	return 0;
}

static const struct jv *get(const struct jv *o, const char *key)
{
	if (o->t != JV_OBJ)
		return NULL;
	for (int i = 0; i < o->n; i++)
		if (!strcmp(o->keys[i], key))
			return &o->kids[i];
	return NULL;
}

static const char *get_str(const struct jv *o, const char *key)
{
	const struct jv *v = get(o, key);
	return v && v->t == JV_STR ? v->str : NULL;
}

/* ---- the state file ---- */

void state_free(struct state *st)
{
	free(st->s);
	memset(st, 0, sizeof(*st));
}

static struct saved *state_push(struct state *st)
{
	st->s = array_room(st->s, st->n, &st->cap, 16, sizeof(*st->s));
	struct saved *s = &st->s[st->n++];
	memset(s, 0, sizeof(*s));
	return s;
}

void state_add(struct state *st, const struct item *it)
{
	for (int i = 0; i < st->n; i++)
		if (!strcmp(st->s[i].key, it->key))
			return;
	struct saved *s = state_push(st);
	s->knob = it->knob;
	s->order = it->order;
	snprintf(s->dev, sizeof(s->dev), "%s", it->dev);
	snprintf(s->key, sizeof(s->key), "%s", it->key);
	snprintf(s->prev, sizeof(s->prev), "%s", it->cur);
}

int state_load(const char *path, struct state *st)
{
	memset(st, 0, sizeof(*st));
	char *data;
	int rc = read_file(path, &data, NULL);
	if (rc)
		return rc;
	const char *p = data;
	struct jv root;
	rc = parse_value(&p, &root, 0);
	free(data);
	if (rc || root.t != JV_OBJ) {
		jv_free(&root);
		return -EINVAL;
	}
	const struct jv *ver = get(&root, "version"), *arr = get(&root, "saved");
	if (!ver || ver->t != JV_NUM || ver->num != 1 || !arr || arr->t != JV_ARR) {
		jv_free(&root);
		return -EINVAL;
	}
	const char *prof = get_str(&root, "profile"), *cr = get_str(&root, "created");
	snprintf(st->profile, sizeof(st->profile), "%s", prof ? prof : "");
	snprintf(st->created, sizeof(st->created), "%s", cr ? cr : "");
	for (int i = 0; i < arr->n; i++) {
		const struct jv *e = &arr->kids[i];
		const char *knob = get_str(e, "knob"), *dev = get_str(e, "device"),
			   *key = get_str(e, "key"), *prev = get_str(e, "previous");
		const struct jv *ord = get(e, "order");
		int k = knob ? knob_by_name(knob) : -1;
		if (k < 0 || !dev || !key || !prev || !ord || ord->t != JV_NUM ||
		    (strncmp(key, "sys:", 4) && strncmp(key, "nvme:", 5)) || strstr(key, "..")) {
			jv_free(&root);
			state_free(st);
			return -EINVAL;
		}
		struct saved *s = state_push(st);
		s->knob = (enum knob_id)k;
		s->order = (int)ord->num;
		snprintf(s->dev, sizeof(s->dev), "%s", dev);
		snprintf(s->key, sizeof(s->key), "%s", key);
		snprintf(s->prev, sizeof(s->prev), "%s", prev);
	}
	jv_free(&root);
	return 0;
}

int state_save(const char *path, const struct state *st)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return -errno;
	struct jw w;
	jw_init(&w, f, true);
	jw_obj_begin(&w);
	jw_key(&w, "version");
	jw_u64(&w, 1);
	jw_key(&w, "tool");
	jw_str(&w, "nvmetune");
	jw_key(&w, "created");
	jw_str(&w, st->created);
	jw_key(&w, "profile");
	jw_str(&w, st->profile);
	jw_key(&w, "saved");
	jw_arr_begin(&w);
	for (int i = 0; i < st->n; i++) {
		const struct saved *s = &st->s[i];
		jw_obj_begin(&w);
		jw_key(&w, "knob");
		jw_str(&w, knob_name(s->knob));
		jw_key(&w, "device");
		jw_str(&w, s->dev);
		jw_key(&w, "key");
		jw_str(&w, s->key);
		jw_key(&w, "previous");
		jw_str(&w, s->prev);
		jw_key(&w, "order");
		jw_i64(&w, s->order);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	jw_obj_end(&w);
	jw_finish(&w);
	if (fclose(f)) {
		free(buf);
		return -ENOMEM;
	}
	int rc = write_file_atomic(path, buf, len, 0644);
	free(buf);
	return rc;
}
