'use strict';
// Starts the pinned s3rver on 127.0.0.1 for spoolfs tests (see start-s3rver.sh).
// Usage: node run-s3rver.js DIR PORT [BUCKET...]
// Prints "PORT <n>" once listening; SIGTERM/SIGINT close the server and exit 0.
const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

// --- Fixes for s3rver 3.7.1 on current Node (applied before s3rver loads) -------
//
// 1. Continuation tokens are DES-encrypted; DES is not in OpenSSL 3's default
//    provider (ERR_OSSL_EVP_UNSUPPORTED, a 500 on every truncated listing). Tokens
//    are opaque and only ever deciphered by s3rver, so map 'des' (8-byte key and IV)
//    to AES-128-CTR (no padding): same token layout, works on every OpenSSL.
for (const fn of ['createCipheriv', 'createDecipheriv']) {
  const orig = crypto[fn];
  crypto[fn] = function (alg, key, iv, ...rest) {
    if (String(alg).toLowerCase() === 'des' && key.length === 8 && iv.length === 8) {
      return orig.call(crypto, 'aes-128-ctr', Buffer.concat([key, key]),
        Buffer.concat([iv, Buffer.alloc(8)]), ...rest);
    }
    return orig.call(crypto, alg, key, iv, ...rest);
  };
}

const lib = path.join(__dirname, 'node_modules', 's3rver', 'lib');
const S3rver = require(path.join(__dirname, 'node_modules', 's3rver'));
const FilesystemStore = require(path.join(lib, 'stores', 'filesystem.js'));
const S3Object = require(path.join(lib, 'models', 'object.js'));

// 2. listObjects with a delimiter prunes every directory two levels below the
//    prefix, so a common prefix holding only deeper keys (a/b/c with delimiter '/')
//    is never reported. Replacement: walk every object, group by delimiter. As
//    upstream, max-keys counts objects only (the controller builds the next token
//    from the last object); common prefixes past the last object of a truncated
//    page are left to the next page, so none repeats across pages.
const SUFFIX = '._S3rver_object';
const bytes = s => Buffer.from(s, 'utf8');
function entries(dir) {
  try {
    return fs.readdirSync(dir, { withFileTypes: true });
  } catch (e) {
    return [];
  }
}
function hasObject(dir) {
  for (const e of entries(dir)) {
    if (e.isDirectory() ? hasObject(path.join(dir, e.name)) : e.name.endsWith(SUFFIX)) {
      return true;
    }
  }
  return false;
}
// Yields [name, isCommonPrefix] for every key under prefix (common prefixes whole when
// the delimiter is '/', where a directory is a common prefix), in no order.
function* walk(dir, rel, prefix, delimiter, startAfter) {
  for (const e of entries(dir)) {
    if (!e.isDirectory()) {
      if (e.name.endsWith(SUFFIX)) yield [rel + e.name.slice(0, -SUFFIX.length), false];
      continue;
    }
    const sub = rel + e.name + '/';
    if (!sub.startsWith(prefix) && !prefix.startsWith(sub)) continue; // outside prefix
    const full = path.join(dir, e.name);
    if (delimiter === '/' && sub.length > prefix.length && sub.startsWith(prefix) &&
        sub.indexOf('/', prefix.length) === sub.length - 1) {
      // sub is a common prefix: one object anywhere below is enough
      if (startAfter.startsWith(sub)) {
        yield* walk(full, sub, prefix, delimiter, startAfter);
      } else if (Buffer.compare(bytes(sub), bytes(startAfter)) > 0 && hasObject(full)) {
        yield [sub, true];
      }
      continue;
    }
    yield* walk(full, sub, prefix, delimiter, startAfter);
  }
}
FilesystemStore.prototype.listObjects = async function (bucket, options) {
  const { delimiter = '', startAfter = '', prefix = '', maxKeys = Infinity } = options;
  const seen = new Set();
  const items = [];
  for (const [name, isCp] of walk(this.getBucketPath(bucket), '', prefix, delimiter,
    startAfter)) {
    let entry = name;
    let cp = isCp;
    if (!cp) {
      if (!name.startsWith(prefix) || Buffer.compare(bytes(name), bytes(startAfter)) <= 0) {
        continue;
      }
      const i = delimiter ? name.indexOf(delimiter, prefix.length) : -1;
      if (i !== -1) {
        entry = name.slice(0, i + delimiter.length);
        cp = true;
      }
    }
    if (cp) {
      if (seen.has(entry)) continue;
      seen.add(entry);
    }
    items.push([entry, cp]);
  }
  items.sort((a, b) => Buffer.compare(bytes(a[0]), bytes(b[0])));
  const objects = [];
  const found = []; // [common prefix, number of objects before it]
  let isTruncated = false;
  for (const [entry, cp] of items) {
    if (cp) {
      found.push([entry, objects.length]);
      continue;
    }
    if (objects.length >= maxKeys) {
      isTruncated = true;
      break;
    }
    objects.push(entry);
  }
  const commonPrefixes = found
    .filter(([, before]) => !isTruncated || before < objects.length) // else next page's
    .map(([cp]) => cp);
  const metadata = await Promise.all(
    objects.map(k => this.getMetadata(bucket, k).catch(() => undefined)),
  );
  return {
    objects: objects
      .map((k, n) => (metadata[n] ? new S3Object(bucket, k, null, metadata[n]) : null))
      .filter(Boolean),
    commonPrefixes,
    isTruncated,
  };
};

const [directory, port, ...buckets] = process.argv.slice(2);
if (!directory || port === undefined) {
  console.error('usage: run-s3rver.js DIR PORT [BUCKET...]');
  process.exit(2);
}
const server = new S3rver({
  address: '127.0.0.1',
  port: Number(port),
  directory,
  silent: process.env.S3RVER_VERBOSE ? false : true,
  vhostBuckets: false,
  configureBuckets: buckets.map(name => ({ name, configs: [] })),
});
server
  .run()
  .then(({ port: p }) => {
    process.stdout.write(`PORT ${p}\n`);
  })
  .catch(err => {
    console.error(`s3rver: ${err.message}`);
    process.exit(1);
  });
let closing = false;
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    if (closing) return;
    closing = true;
    server.close().then(() => process.exit(0), () => process.exit(0));
    setTimeout(() => process.exit(0), 2000).unref();
  });
}
