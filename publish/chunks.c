/*
 * Chunk hash lists: for each file over --chunk-over, the sha256 of each --chunk-size piece
 * in order, so a mount can verify every chunk before it serves a byte of it
 * (doc/manifest.md, "Chunk hashes"). The digests are taken while the file is copied (or
 * probed), from the same bytes that are hashed whole, and the list is stored as an object
 * of its own, named by its sha256 in the file's entry.
 *
 * A chunker belongs to its job's thread while the job runs; the main thread reads it after
 * the workers are joined.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "publish/publish_i.h"

int pub_chunker_reset(struct pub_chunker *c, uint64_t chunk_size, uint64_t file_size)
{
	size_t n = (size_t)((file_size + chunk_size - 1) / chunk_size);

	if (!c->md && !(c->md = EVP_MD_CTX_new()))
		return -ENOMEM;
	free(c->list);
	c->list = calloc(n ? n : 1, PUB_SHA256_LEN);
	if (!c->list)
		return -ENOMEM;
	c->cap = n;
	c->n = 0;
	c->chunk_size = chunk_size;
	c->in_chunk = 0;
	return EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) == 1 ? 0 : -EIO;
}

/* Closes the chunk being hashed. */
static int close_chunk(struct pub_chunker *c)
{
	unsigned char md[EVP_MAX_MD_SIZE];

	/* A file that grew since lstat: its list is cut where the walk saw it end, and the
	 * size mismatch fails the commit (pub_chunker_done). */
	if (c->n >= c->cap || EVP_DigestFinal_ex(c->md, md, NULL) != 1)
		return -EIO;
	memcpy(c->list + c->n * PUB_SHA256_LEN, md, PUB_SHA256_LEN);
	c->n++;
	c->in_chunk = 0;
	return EVP_DigestInit_ex(c->md, EVP_sha256(), NULL) == 1 ? 0 : -EIO;
}

int pub_chunker_feed(struct pub_chunker *c, const unsigned char *p, size_t len)
{
	while (len > 0) {
		size_t take =
		    c->chunk_size - c->in_chunk < len ? (size_t)(c->chunk_size - c->in_chunk) : len;
		int rc;
		if (EVP_DigestUpdate(c->md, p, take) != 1)
			return -EIO;
		c->in_chunk += take;
		p += take;
		len -= take;
		if (c->in_chunk == c->chunk_size && (rc = close_chunk(c)))
			return rc;
	}
	return 0;
}

int pub_chunker_done(struct pub_chunker *c)
{
	int rc = c->in_chunk ? close_chunk(c) : 0;

	return rc == 0 && c->n != c->cap ? -EIO : rc;
}

void pub_chunker_free(struct pub_chunker *c)
{
	EVP_MD_CTX_free(c->md);
	free(c->list);
	memset(c, 0, sizeof(*c));
}

/*
 * A compressed file's hash list: 36 bytes per chunk, its sha256 then its frame's stored
 * length (little-endian), so that a mount learns the frame table with the digests, in one
 * fetch (doc/manifest.md, version 3). NULL on -ENOMEM; *len its bytes.
 */
static unsigned char *records(const struct pub_entry *e, size_t *len)
{
	unsigned char *v = malloc(e->chunks.n * PUB_RECORD_LEN + 1), *p = v;

	for (size_t k = 0; v && k < e->chunks.n; k++, p += PUB_RECORD_LEN) {
		uint32_t n = e->stored.frames[k];
		memcpy(p, e->chunks.list + k * PUB_SHA256_LEN, PUB_SHA256_LEN);
		p[32] = (unsigned char)n;
		p[33] = (unsigned char)(n >> 8);
		p[34] = (unsigned char)(n >> 16);
		p[35] = (unsigned char)(n >> 24);
	}
	*len = e->chunks.n * PUB_RECORD_LEN;
	return v;
}

int pub_chunks_store(struct pub_tree *tree, struct pub_store *st)
{
	int rc = 0;

	for (size_t i = 0; i < tree->n_entries && rc == 0; i++) {
		struct pub_entry *e = tree->entries[i];
		unsigned char *v;
		size_t len;
		if (!e->chunks.list)
			continue;
		if (!e->stored.on) {
			rc = pub_store_bytes(st, e->chunks.list, e->chunks.n * PUB_SHA256_LEN,
			                     e->chunk_list_sha256);
			continue;
		}
		/* One frame per chunk: the same cut of the same size (run.c). */
		if (e->stored.n != e->chunks.n || e->stored.frame != e->chunks.chunk_size)
			return -EIO;
		if (!(v = records(e, &len)))
			return -ENOMEM;
		rc = pub_store_bytes(st, v, len, e->chunk_list_sha256);
		free(v);
	}
	return rc;
}
