/**
 * Fairness figures of `npm run bench:fair-share`: Jain's index and the allocations it is taken over.
 */

/**
 * Jain's fairness index of normalised allocations: J = (Σx)² / (n · Σx²), where x_i is what tenant
 * i got divided by what it was owed (its max-min fair share of its demand, so x_i = 1 is a tenant
 * that got exactly its share). J is 1 when every tenant got the same fraction of its share and 1/n
 * when one tenant got everything; it depends only on the ratios between the x_i (scaling every x_i
 * alike leaves it unchanged). Source: R. Jain, D. Chiu, W. Hawe, "A Quantitative Measure of
 * Fairness and Discrimination for Resource Allocation in Shared Computer Systems", DEC-TR-301, 1984.
 * @param normalised x_i ≥ 0, one per tenant.
 * @returns J in [1/n, 1]; 1 for no tenants or when every x_i is 0 (nobody was owed or got anything).
 * @throws RangeError when an x_i is negative or not finite.
 */
export function jainIndex(normalised: readonly number[]): number {
  let sum = 0;
  let squares = 0;
  for (const x of normalised) {
    if (!Number.isFinite(x) || x < 0) throw new RangeError(`jainIndex: allocations must be finite and ≥ 0, got ${x}`);
    sum += x;
    squares += x * x;
  }
  return squares === 0 ? 1 : (sum * sum) / (normalised.length * squares);
}
