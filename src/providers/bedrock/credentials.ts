/**
 * What a Bedrock deployment signs its requests with: AWS credentials from the environment (the
 * variables every AWS SDK reads: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, optional
 * AWS_SESSION_TOKEN) and the region of the signature's credential scope.
 * Source: AWS SDKs and Tools reference guide, "Environment variables" and "AWS Region".
 */

/** Static AWS credentials (an IAM user's, or temporary ones with their session token). */
export interface AwsCredentials {
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** STS session token of temporary credentials. */
  readonly sessionToken?: string;
}

/** How a Bedrock deployment's requests are signed (SigV4, service `bedrock`). */
export interface BedrockSigning {
  readonly region: string;
  readonly credentials: AwsCredentials;
}

/** `bedrock-runtime.<region>.amazonaws.com` (also `-fips` and the China partition's `.com.cn`). */
const RUNTIME_HOST = /^bedrock-runtime(?:-fips)?\.([a-z]{2}(?:-[a-z]+)+-\d+)\.amazonaws\.com(?:\.cn)?$/;

/** The region named by a Bedrock runtime endpoint's host name, or undefined for another host (a proxy, the simulator). */
export function regionOfEndpoint(baseUrl: string): string | undefined {
  try {
    return RUNTIME_HOST.exec(new URL(baseUrl).hostname)?.[1];
  } catch {
    return undefined;
  }
}

/**
 * The signing region and credentials of a Bedrock deployment.
 * @param deployment its `base_url` and optional `region` (which wins).
 * @param env where the AWS_* variables are read.
 * @returns the signing, or the problems (names of missing variables; never their values).
 */
export function bedrockSigningFromEnv(deployment: { readonly base_url: string; readonly region?: string | undefined }, env: NodeJS.ProcessEnv): BedrockSigning | { readonly problems: readonly string[] } {
  const problems: string[] = [];
  const region = deployment.region ?? regionOfEndpoint(deployment.base_url) ?? nonEmpty(env.AWS_REGION) ?? nonEmpty(env.AWS_DEFAULT_REGION);
  if (region === undefined) problems.push('region: set region, or AWS_REGION, or use a bedrock-runtime.<region>.amazonaws.com base_url');
  const accessKeyId = nonEmpty(env.AWS_ACCESS_KEY_ID);
  const secretAccessKey = nonEmpty(env.AWS_SECRET_ACCESS_KEY);
  if (accessKeyId === undefined) problems.push('environment variable AWS_ACCESS_KEY_ID is not set (or set api_key_env to a Bedrock API key)');
  if (secretAccessKey === undefined) problems.push('environment variable AWS_SECRET_ACCESS_KEY is not set');
  if (region === undefined || accessKeyId === undefined || secretAccessKey === undefined) return { problems };
  const sessionToken = nonEmpty(env.AWS_SESSION_TOKEN);
  return { region, credentials: { accessKeyId, secretAccessKey, ...(sessionToken === undefined ? {} : { sessionToken }) } };
}

function nonEmpty(v: string | undefined): string | undefined {
  return v === undefined || v.length === 0 ? undefined : v;
}
