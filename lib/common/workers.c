#include "common/workers.h"

#include <pthread.h>
#include <stdlib.h>

struct workers {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct task *head, *tail;    /* normal */
	struct task *uhead, *utail;  /* urgent */
	int stop;
	unsigned n;
	pthread_t th[];
};

static void *worker(void *arg)
{
	struct workers *w = arg;
	pthread_mutex_lock(&w->mu);
	for (;;) {
		while (!w->head && !w->uhead && !w->stop)
			pthread_cond_wait(&w->cv, &w->mu);
		struct task *t;
		if (w->uhead) {
			t = w->uhead;
			w->uhead = t->next;
			if (!w->uhead)
				w->utail = NULL;
		} else if (w->head) {
			t = w->head;
			w->head = t->next;
			if (!w->head)
				w->tail = NULL;
		} else {
			break;
		}
		pthread_mutex_unlock(&w->mu);
		t->fn(t);
		pthread_mutex_lock(&w->mu);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

struct workers *workers_create(unsigned n)
{
	struct workers *w = calloc(1, sizeof *w + n * sizeof(pthread_t));
	if (!w)
		return NULL;
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cv, NULL);
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&w->th[i], NULL, worker, w))
			break;
		w->n++;
	}
	if (!w->n) {
		free(w);
		return NULL;
	}
	return w;
}

static void push(struct workers *w, struct task **head, struct task **tail, struct task *t)
{
	t->next = NULL;
	pthread_mutex_lock(&w->mu);
	if (*tail)
		(*tail)->next = t;
	else
		*head = t;
	*tail = t;
	pthread_cond_signal(&w->cv);
	pthread_mutex_unlock(&w->mu);
}

void workers_submit(struct workers *w, struct task *t)
{
	push(w, &w->head, &w->tail, t);
}

void workers_submit_urgent(struct workers *w, struct task *t)
{
	push(w, &w->uhead, &w->utail, t);
}

void workers_destroy(struct workers *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->mu);
	w->stop = 1;
	pthread_cond_broadcast(&w->cv);
	pthread_mutex_unlock(&w->mu);
	for (unsigned i = 0; i < w->n; i++)
		pthread_join(w->th[i], NULL);
	pthread_mutex_destroy(&w->mu);
	pthread_cond_destroy(&w->cv);
	free(w);
}

unsigned workers_count(const struct workers *w)
{
	return w ? w->n : 0;
}
