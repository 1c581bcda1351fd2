/**
 * Redis keys of the global cap. Every key is namespaced by cluster and carries its bucket name as a
 * Redis Cluster hash tag (`{...}`), so a script call on one bucket stays on one slot.
 */

/**
 * Key of a global-cap bucket: `qr:<cluster>:cap:{<bucket>}`. Only the bucket is hashed, so buckets
 * spread over a Redis Cluster's slots while each script call touches one.
 * @param cluster the cluster name (`cluster.name`).
 * @param bucket the bucket's name, e.g. a deployment id or `tenant:<id>:tokens`.
 * @throws RangeError when either name is empty or contains `{` or `}` (a brace would change the hash tag).
 */
export function capKey(cluster: string, bucket: string): string {
  checkName('cluster', cluster);
  checkName('bucket', bucket);
  return `qr:${cluster}:cap:{${bucket}}`;
}

function checkName(what: string, name: string): void {
  if (name === '') throw new RangeError(`global cap ${what} name is empty`);
  if (name.includes('{') || name.includes('}')) {
    throw new RangeError(`global cap ${what} name ${JSON.stringify(name)} contains a brace; braces would change the Redis Cluster hash tag`);
  }
}

/**
 * Key of the global cap's epoch (`lua/epoch.lua`): `qr:<cluster>:cap-epoch`. Not a bucket key, so no
 * bucket name can collide with it.
 * @throws RangeError when the cluster name is empty or contains a brace.
 */
export function capEpochKey(cluster: string): string {
  checkName('cluster', cluster);
  return `qr:${cluster}:cap-epoch`;
}

/**
 * Key of a bucket's provider-feedback log (`lua/feedback-lower.lua`): `qr:<cluster>:cap:{<bucket>}:feedback`,
 * in the bucket's hash tag so one call on both stays on one Redis Cluster slot.
 * @throws RangeError as {@link capKey}.
 */
export function feedbackLogKey(cluster: string, bucket: string): string {
  return `${capKey(cluster, bucket)}:feedback`;
}
