/**
 * The admin API's answers for the catalogue: `{ status, body }` in OpenAI's error shape, shared by
 * the admin operations (`admin.ts`) and the import (`import.ts`).
 */
import type { DocProblem } from './docs.ts';

/** An admin answer: HTTP status and JSON body. */
export interface AdminAnswer {
  readonly status: number;
  readonly body: unknown;
}

/** An error answer: `{ error: { message, type, param, code } }`, the type from the status. */
export function error(status: number, code: string, message: string, param: string | null = null): AdminAnswer {
  const type = status === 404 ? 'not_found_error' : status === 409 ? 'conflict_error' : status === 503 ? 'service_unavailable' : 'invalid_request_error';
  return { status, body: { error: { message, type, param, code } } };
}

/** A 400 `invalid_field` naming the first problem's field in `param`, every problem in `problems`. */
export function invalid(problems: readonly DocProblem[]): AdminAnswer {
  const first = problems[0] ?? { field: '(body)', message: 'invalid' };
  return { status: 400, body: { error: { message: `${first.field}: ${first.message}`, type: 'invalid_request_error', param: first.field, code: 'invalid_field', problems } } };
}

/** 409 `catalogue_off`: no catalogue store is configured. */
export function off(): AdminAnswer {
  return error(409, 'catalogue_off', 'This gateway has no catalogue store (catalogue.store: none): tenants come from the config file only. Set catalogue.store to file or postgres.');
}

/** 503 `catalogue_unavailable`: the store does not answer. */
export function unavailable(err: Error): AdminAnswer {
  return error(503, 'catalogue_unavailable', `The catalogue store does not answer (${err.message}); requests are still served from the catalogue held. Try the change again once it is back.`);
}
