// The console's login and the ACL page in a real browser, against a real
// `tern-broker --standalone` with ACL on, whose console has a login and admin credentials.
// Run by shell/client/tests/console.rs. Environment: CONSOLE_URL, SHOTS, CHROMIUM.
import { chromium } from "playwright-core";
import assert from "node:assert/strict";

const env = (k) => { const v = process.env[k]; assert.ok(v, `${k} is not set`); return v; };
const URL_ = env("CONSOLE_URL"), SHOTS = env("SHOTS");
const log = (...a) => console.error("[browser]", ...a);

const browser = await chromium.launch({ executablePath: env("CHROMIUM"), headless: true, args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
page.on("pageerror", (e) => { log("page error:", e.message); process.exitCode = 1; });
const shot = (name) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });

try {
  // Every page sends an unknown visitor to the login; a wrong password is said so.
  await page.goto(URL_ + "/#/acl");
  await page.locator("#login").waitFor();
  await page.fill("input[name=user]", "operator");
  await page.fill("input[name=password]", "wrong-password");
  await page.click("#login button");
  await page.locator("#error").filter({ hasText: "wrong user or password" }).waitFor();
  await page.fill("input[name=password]", "console-pw-1");
  await page.click("#login button");
  await page.locator("#brokers tbody tr").first().waitFor();

  // The accounts, without their secrets.
  await page.goto(URL_ + "/#/acl");
  await page.locator('#acl tr[data-account="ops_admin"]').waitFor();
  await page.locator('#acl tr[data-account="app_user"]').waitFor();
  const html = await page.content();
  assert.ok(!html.includes("ops_secret") && !html.includes("app_secret"), "a secret key reached the page");

  // With admin credentials: create an account, then delete it through the confirmation.
  await page.fill("#acl-access-key", "console_user1");
  await page.fill("#acl-secret-key", "console_secret1");
  await page.selectOption("#acl-topic-perm", "PUB");
  await page.click("#acl-save");
  await page.locator(".notice").filter({ hasText: "Account console_user1 saved" }).waitFor();
  await page.locator('#acl tr[data-account="console_user1"]').filter({ hasText: "PUB" }).waitFor();
  assert.ok(!(await page.content()).includes("console_secret1"), "the new secret was shown");
  await shot("acl");
  console.log("STEP created");
  await new Promise((r) => process.stdin.once("data", r));
  page.once("dialog", (d) => d.accept());
  await page.locator('#acl tr[data-account="console_user1"] button:has-text("Delete")').click();
  await page.locator(".notice").filter({ hasText: "Account console_user1 deleted" }).waitFor();
  assert.equal(await page.locator('#acl tr[data-account="console_user1"]').count(), 0);
  log("all steps passed");
} catch (e) {
  await shot("acl-failure").catch(() => {});
  log("FAILED:", e.stack || e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
  process.exit(process.exitCode || 0);
}
