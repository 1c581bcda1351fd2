/**
 * Which call each deployment gets for a request: the request itself when the deployment speaks the
 * client's wire format, else its translation (`Exchange.callFor`); a request no deployment of the
 * model can take is refused before anything is taken.
 */
import type { ResolvedDeployment } from '../config/load.ts';
import { TranslationError } from '../providers/translate/index.ts';
import { wireFormatOf } from '../providers/wire-format.ts';
import type { DeploymentCall, Exchange } from './request.ts';

/**
 * The call of the primary deployment when it speaks another format than the client (its
 * translation); undefined when it speaks the client's (the call is `ex`); null when its translation
 * refuses the request but a failover deployment can take it; the primary's refusal when no
 * deployment of the model can.
 */
export function firstCall(ex: Exchange): DeploymentCall | null | undefined | TranslationError {
  if (wireFormatOf(ex.deployment.provider) === ex.dialect) return undefined;
  const primary = translation(ex, ex.deployment);
  if (!(primary instanceof Error)) return primary;
  for (const d of ex.failover) if (!(translation(ex, d) instanceof Error)) return null;
  return primary instanceof TranslationError ? primary : new TranslationError('the request could not be translated');
}

/** `ex.callFor(deployment)`, or the error that says why the request cannot be said in its format (any error: a translation that throws is a refusal). */
function translation(ex: Exchange, deployment: ResolvedDeployment): DeploymentCall | Error {
  try {
    return ex.callFor(deployment);
  } catch (err) {
    return err instanceof Error ? err : new Error(String(err));
  }
}

/** `ex.callFor(deployment)`, or undefined when the request cannot be said in its format. */
export function translatedCall(ex: Exchange, deployment: ResolvedDeployment): DeploymentCall | undefined {
  try {
    return ex.callFor(deployment);
  } catch {
    return undefined;
  }
}
