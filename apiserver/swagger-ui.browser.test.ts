import { existsSync, mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from '@jest/globals';
import { chromium, type Browser, type Page } from 'playwright-core';
import { startTestHub, type TestHub } from '../test/harness/hub.js';
import { allRoutes } from './app.js';

/**
 * The API console in a real browser: Debian's Chromium driven by playwright-core (no browser
 * download). In CI a missing Chromium is a failure; on a workstation the suite is skipped.
 */
const CHROMIUM = '/usr/bin/chromium';
const ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-quic',
  '--no-first-run',
  '--disable-component-update',
  '--disable-sync',
];
/**
 * The page is opened under a host name rather than 127.0.0.1, as a deployed console is (Swagger UI
 * skips some outside calls, e.g. the validator badge, for loopback addresses). Chromium resolves that
 * name to the hub and no other name at all, so a regression is seen as a request and never leaves the machine.
 */
const HOST = 'svc-hub.test';
const RESOLVER = `--host-resolver-rules=MAP ${HOST} 127.0.0.1, MAP * ~NOTFOUND`;
const MISSING = `${CHROMIUM} not found: install it with \`apt-get install chromium\` (Debian) to run the Swagger UI browser test`;

const haveChromium = existsSync(CHROMIUM);
const inCi = Boolean(process.env.CI) && !['false', '0'].includes(process.env.CI!.toLowerCase());
if (!haveChromium && !inCi) console.warn(`skipping apiserver/swagger-ui.browser.test.ts: ${MISSING}`);

const suite = haveChromium ? describe : inCi ? failing : describe.skip;

/** Stands in for the suite when CI lacks Chromium: one test that fails and says what to install. */
function failing(name: string, _body: () => void): void {
  describe(name, () => {
    it('needs Chromium', () => {
      throw new Error(MISSING);
    });
  });
}

suite('Swagger UI console in headless Chromium', () => {
  const visible = allRoutes().filter((decl) => !decl.hidden);
  let hub: TestHub;
  let browser: Browser;
  let page: Page;
  let base: string;
  const requests: string[] = [];
  const failedResponses: string[] = [];
  const pageErrors: string[] = [];

  beforeAll(async () => {
    hub = await startTestHub();
    base = `http://${HOST}:${new URL(hub.url).port}`;
    browser = await chromium.launch({ executablePath: CHROMIUM, args: [...ARGS, RESOLVER] });
    page = await browser.newPage({ viewport: { width: 1280, height: 1600 } });
    page.on('request', (request) => requests.push(request.url()));
    page.on('response', (response) => {
      if (response.status() >= 400) failedResponses.push(`${response.status()} ${response.url()}`);
    });
    page.on('pageerror', (error) => pageErrors.push(error.message));
    const response = await page.goto(`${base}/q/swagger-ui/`, { waitUntil: 'load' });
    expect(response?.status()).toBe(200);
    await page.waitForSelector('.opblock', { timeout: 20_000 });
    // A string, evaluated in the page (this file is compiled without the DOM library).
    await page.waitForFunction(`document.querySelectorAll('.opblock').length >= ${visible.length}`, undefined, { timeout: 20_000 });
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await hub?.stop();
  });

  it('renders one operation block per non-hidden route', async () => {
    expect(await page.locator('.opblock').count()).toBeGreaterThanOrEqual(visible.length);
    const paths = (await page.locator('.opblock .opblock-summary-path').allInnerTexts()).map((text) => text.replace(/\u200b/g, '').trim());
    for (const path of ['/api/platform/health', '/api/bff/v1/me', '/api/platform/migrations']) expect(paths).toContain(path);
    for (const decl of visible) expect(paths).toContain(decl.path);
  });

  it('shows the document title and loaded it from /q/openapi', async () => {
    await expect(page.locator('.info .title').innerText()).resolves.toContain('svc-hub API');
    expect(requests).toContain(`${base}/q/openapi`);
  });

  it('asks no host but the hub for anything (no CDN, no validator badge, no telemetry)', () => {
    const origin = new URL(base).origin;
    const elsewhere = requests.filter((url) => !/^(data|blob):/.test(url) && new URL(url).origin !== origin);
    expect(elsewhere).toEqual([]);
    expect(requests.length).toBeGreaterThan(3);
  });

  it('loads every asset and runs without page errors', () => {
    expect(failedResponses).toEqual([]);
    expect(pageErrors).toEqual([]);
  });

  it('redirects /q/swagger-ui to /q/swagger-ui/', async () => {
    const other = await browser.newPage();
    try {
      const response = await other.goto(`${base}/q/swagger-ui`);
      expect(response?.status()).toBe(200);
      expect(other.url()).toBe(`${base}/q/swagger-ui/`);
    } finally {
      await other.close();
    }
  });

  it('can be captured as a screenshot', async () => {
    // Kept only when asked for, to be looked at: then outside the run's own TMPDIR, which its teardown removes.
    const keep = Boolean(process.env.SVC_TEST_SCREENSHOT);
    const dir = mkdtempSync(join((keep && process.env.SVC_TEST_OUTER_TMPDIR) || tmpdir(), 'svc-swagger-ui-'));
    const file = join(dir, 'swagger-ui.png');
    try {
      await page.screenshot({ path: file, fullPage: true });
      expect(statSync(file).size).toBeGreaterThan(10_000);
      if (keep) console.info(`Swagger UI screenshot: ${file}`);
    } finally {
      if (!keep) rmSync(dir, { recursive: true, force: true });
    }
  });
});
