// Tokens for the kind e2e run (e2e/kind/run.sh), with node:crypto only: an RS256 key pair whose
// public half the in-cluster JWKS server publishes, and JWTs signed with it.
//
//   node e2e/kind/token.mjs keys DIR                 writes DIR/key.json (the private JWK) once,
//                                                    prints the JWKS of its public half
//   node e2e/kind/token.mjs mint DIR ISSUER CLAIMS   prints a JWT of ISSUER valid for one hour with
//                                                    the claims of the JSON object CLAIMS
import { createPrivateKey, createPublicKey, generateKeyPairSync, sign } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [command, dir, issuer, claims] = process.argv.slice(2);
const KID = 'svc-hub-e2e';
const keyFile = join(dir ?? '.', 'key.json');
const b64url = (data) => Buffer.from(data).toString('base64url');

if (command === 'keys' && dir) {
  if (!existsSync(keyFile)) {
    mkdirSync(dir, { recursive: true });
    const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
    writeFileSync(keyFile, JSON.stringify(privateKey.export({ format: 'jwk' })), { mode: 0o600 });
  }
  const { n, e } = createPublicKey({ key: JSON.parse(readFileSync(keyFile, 'utf8')), format: 'jwk' }).export({ format: 'jwk' });
  process.stdout.write(`${JSON.stringify({ keys: [{ kty: 'RSA', n, e, kid: KID, alg: 'RS256', use: 'sig' }] })}\n`);
} else if (command === 'mint' && dir && issuer && claims) {
  const key = createPrivateKey({ key: JSON.parse(readFileSync(keyFile, 'utf8')), format: 'jwk' });
  const now = Math.floor(Date.now() / 1000);
  const header = b64url(JSON.stringify({ alg: 'RS256', typ: 'JWT', kid: KID }));
  const payload = b64url(JSON.stringify({ iss: issuer, sub: 'e2e-kind', iat: now, exp: now + 3600, ...JSON.parse(claims) }));
  const signature = sign('sha256', Buffer.from(`${header}.${payload}`), key).toString('base64url');
  process.stdout.write(`${header}.${payload}.${signature}\n`);
} else {
  process.stderr.write('usage: token.mjs keys DIR | token.mjs mint DIR ISSUER CLAIMS_JSON\n');
  process.exit(2);
}
