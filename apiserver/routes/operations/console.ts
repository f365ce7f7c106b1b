import { readFileSync } from 'node:fs';
import { extname, join } from 'node:path';
import { createRequire } from 'node:module';
import { route, type RouteDecl } from '../../route.js';
import { errorBody } from '../schemas.js';

// swagger-ui-dist is served from the installed package: no CDN, nothing fetched at run time.
const require = createRequire(import.meta.url);
const distDir = (require('swagger-ui-dist') as { getAbsoluteFSPath(): string }).getAbsoluteFSPath();

const TYPES: Record<string, string> = {
  '.css': 'text/css; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.png': 'image/png',
  '.html': 'text/html; charset=utf-8',
  '.map': 'application/json',
};

const ASSETS = new Set(['swagger-ui.css', 'index.css', 'swagger-ui-bundle.js', 'swagger-ui-standalone-preset.js', 'favicon-32x32.png', 'favicon-16x16.png']);

const INITIALIZER = `window.onload = function () {
  window.ui = SwaggerUIBundle({
    url: '/q/openapi',
    dom_id: '#swagger-ui',
    deepLinking: true,
    // The default (validator.swagger.io) would make the page fetch a badge from the internet.
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
    plugins: [SwaggerUIBundle.plugins.DownloadUrl],
    layout: 'StandaloneLayout',
  });
};
`;

export function consoleRoutes(document: () => Record<string, unknown>): RouteDecl[] {
  return [
    route({
      method: 'GET', path: '/q/openapi', operationId: 'openapi', summary: 'OpenAPI 3.1 document of this build', tags: ['Operations'], auth: 'public',
      query: { type: 'object', properties: { format: { type: 'string', enum: ['json', 'yaml'], description: '`yaml` for the document as YAML; without it, JSON unless `Accept` prefers `application/yaml`' } } },
      responses: {
        200: {
          description: 'The document: JSON (also for `?format=json`), or YAML for `?format=yaml` or, without `format`, an `Accept` that prefers `application/yaml`',
          content: { 'application/json': { type: 'object' }, 'application/yaml': { type: 'string' } },
        },
      },
      hidden: true,
      handler: async ({ ctx, query }) => {
        if (query.format === 'yaml' || (query.format === undefined && ctx.accepts('application/json', 'application/yaml') === 'application/yaml')) {
          const { stringify } = await import('yaml');
          ctx.type = 'application/yaml';
          // The declarations share schema objects; without this they would come out as YAML anchors and aliases.
          ctx.body = stringify(document(), { aliasDuplicateObjects: false });
          return undefined;
        }
        return document();
      },
    }),
    route({
      method: 'GET', path: '/q/swagger-ui', operationId: 'swaggerUiRedirect', summary: 'Interactive console', tags: ['Operations'], auth: 'public',
      responses: { 301: { description: 'To /q/swagger-ui/' } }, hidden: true,
      handler: ({ ctx }) => index(ctx),
    }),
    route({
      method: 'GET', path: '/q/swagger-ui/{file}', operationId: 'swaggerUi', summary: 'Interactive console', tags: ['Operations'], auth: 'public',
      responses: { 200: { description: 'Console page or asset' }, 404: { description: 'No such asset `{"error": "not found"}`', schema: errorBody } }, hidden: true,
      handler: ({ ctx }) => serve(ctx, String(ctx.params.file)),
    }),
    route({
      method: 'GET', path: '/q/swagger-ui/', operationId: 'swaggerUiIndex', summary: 'Interactive console', tags: ['Operations'], auth: 'public',
      responses: { 200: { description: 'Console page' } }, hidden: true,
      handler: ({ ctx }) => index(ctx),
    }),
  ];
}

type Ctx = Parameters<RouteDecl['handler']>[0]['ctx'];

/**
 * The router matches without regard to a trailing slash, so `/q/swagger-ui` and `/q/swagger-ui/`
 * reach both routes: decide on the path itself. The page's asset URLs are relative, hence the redirect.
 */
function index(ctx: Ctx): undefined {
  if (ctx.path.endsWith('/')) return serve(ctx, 'index.html');
  ctx.status = 301;
  ctx.redirect('/q/swagger-ui/');
  return undefined;
}

function serve(ctx: Ctx, file: string): undefined {
  if (file === 'index.html' || file === '') {
    ctx.type = TYPES['.html']!;
    ctx.body = readFileSync(join(distDir, 'index.html'), 'utf8');
  } else if (file === 'swagger-initializer.js') {
    ctx.type = TYPES['.js']!;
    ctx.body = INITIALIZER;
  } else if (ASSETS.has(file)) {
    ctx.type = TYPES[extname(file)] ?? 'application/octet-stream';
    ctx.set('Cache-Control', 'public, max-age=3600');
    ctx.body = readFileSync(join(distDir, file));
  } else {
    ctx.status = 404;
    ctx.body = { error: 'not found' };
  }
  return undefined;
}
