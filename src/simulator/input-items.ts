/**
 * The input items of a stored response, as OpenAI's `GET /v1/responses/{id}/input_items` lists them
 * (https://platform.openai.com/docs/api-reference/responses/input-items; shapes as the `openai`
 * SDKs type `ResponseItem`): a string `input` is one `user` message of one `input_text` part; an
 * item list is kept as sent, messages given an id, a status and their string content as an
 * `input_text` (or, for the assistant, `output_text`) part.
 */

/** One input item's JSON text, in request order. */
export type InputItems = readonly string[];

/**
 * The input items of a Responses request body's `input` (a string, an item list, or absent).
 * @param suffix the response id without `resp_`, giving each item an id `msg_<suffix>_<i>`.
 */
export function inputItemsOf(input: unknown, suffix: string): InputItems {
  const items = typeof input === 'string' ? [{ role: 'user', content: input }] : Array.isArray(input) ? (input as unknown[]) : [];
  return items.map((item, i) => {
    if (item === null || typeof item !== 'object' || Array.isArray(item)) return JSON.stringify(item);
    const fields = item as Record<string, unknown>;
    const type = fields['type'] ?? 'message';
    if (type !== 'message') return JSON.stringify({ id: `item_${suffix}_${i}`, ...fields });
    const role = typeof fields['role'] === 'string' ? fields['role'] : 'user';
    const content = fields['content'];
    const parts = typeof content === 'string' ? [{ type: role === 'assistant' ? 'output_text' : 'input_text', text: content }] : content;
    return JSON.stringify({ id: `msg_${suffix}_${i}`, type: 'message', status: 'completed', role, content: parts });
  });
}

/**
 * The list page of `items` as OpenAI answers it: `order` `desc` (OpenAI's default: the last item
 * first) or `asc`, at most `limit` items (1–100, default 20) after the item `after`, if given.
 * @returns the JSON text, or a message for a bad query.
 */
export function inputItemsPage(items: InputItems, query: Record<string, string | undefined>): { readonly json: string } | { readonly error: string; readonly param: string } {
  const order = query['order'] ?? 'desc';
  if (order !== 'asc' && order !== 'desc') return { error: `Invalid value for 'order': expected one of 'asc' or 'desc', got '${order}'.`, param: 'order' };
  const limit = query['limit'] === undefined ? 20 : Number(query['limit']);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) return { error: `Invalid 'limit': expected an integer between 1 and 100, got '${query['limit']}'.`, param: 'limit' };
  const ordered = order === 'asc' ? items.slice() : items.slice().reverse();
  const ids = ordered.map((item) => /^\{"id":"([^"]*)"/.exec(item)?.[1] ?? '');
  const after = query['after'];
  const from = after === undefined ? 0 : ids.indexOf(after) + 1;
  const page = ordered.slice(from, from + limit);
  const pageIds = ids.slice(from, from + limit);
  const first = pageIds[0];
  const last = pageIds[pageIds.length - 1];
  const json = `{"object":"list","data":[${page.join(',')}],"first_id":${first === undefined ? 'null' : JSON.stringify(first)},"last_id":${last === undefined ? 'null' : JSON.stringify(last)},"has_more":${from + limit < ordered.length}}`;
  return { json };
}
