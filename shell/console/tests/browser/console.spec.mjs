// The console in a real browser (headless Chromium through playwright-core), against a
// real `tern-broker --standalone`. Run by shell/client/tests/console.rs, which starts the
// broker and a consumer and answers this script's steps on stdin:
//   this script prints "STEP sent N"   -> the test starts the consumer, answers "consuming"
//   this script prints "STEP resent K" -> the test checks its consumer got message K once
//                                         more, answers "received"
//   this script prints "STEP reset"    -> the test waits for the re-consumption, answers
//                                         "reconsumed"
//   this script prints "STEP stop consumer" -> the test shuts its consumer down, answers
//                                         "stopped"
// Environment: CONSOLE_URL, DEAD_CONSOLE_URL (a console whose name server is down),
// NAMESRV, BROKER_ADDR, TERN_ADMIN, SHOTS (screenshot folder), CHROMIUM.
import { chromium } from "playwright-core";
import { execFileSync } from "node:child_process";
import { createInterface } from "node:readline";
import assert from "node:assert/strict";

const env = (k) => { const v = process.env[k]; assert.ok(v, `${k} is not set`); return v; };
const URL_ = env("CONSOLE_URL"), DEAD = env("DEAD_CONSOLE_URL"), NS = env("NAMESRV");
const BROKER = env("BROKER_ADDR"), ADMIN = env("TERN_ADMIN"), SHOTS = env("SHOTS");
const TOPIC = "ConsoleOrders", GROUP = "ConsoleGroup", SCRATCH = "ConsoleScratch";

const stdin = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
async function step(name, expect) {
  console.log(`STEP ${name}`);
  const { value, done } = await stdin.next();
  assert.ok(!done, `the test closed stdin at step ${name}`);
  assert.equal(value.trim(), expect, `answer to ${name}`);
}
const log = (...a) => console.error("[browser]", ...a);
const admin = (...args) => execFileSync(ADMIN, [...args, "-n", NS], { encoding: "utf8" });

const browser = await chromium.launch({ executablePath: env("CHROMIUM"), headless: true, args: ["--no-sandbox"] });
const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
page.on("pageerror", (e) => { log("page error:", e.message); process.exitCode = 1; });
const shot = (name) => page.screenshot({ path: `${SHOTS}/${name}.png`, fullPage: true });
const errorBanner = () => page.locator("#error");
// The error banner once it says `re` (a bounded wait: Playwright's default timeout).
const errorShowing = (re) => page.locator("#error", { hasText: re }).waitFor();
const text = (sel) => page.locator(sel).innerText();

try {
  // Overview: the broker and its role and version.
  await page.goto(URL_ + "/#/overview");
  await page.locator("#brokers tbody tr").first().waitFor();
  assert.match(await text("#brokers"), /MASTER/);
  assert.match(await text("#brokers"), /Tern/);

  // Topics: create one through the form; it appears in the list.
  await page.goto(URL_ + "/#/topics");
  await page.fill("#new-topic", TOPIC);
  await page.fill("#read-queues", "4");
  await page.fill("#write-queues", "4");
  await page.click("#create-topic");
  await page.locator(`tr[data-topic="${TOPIC}"]`).waitFor();
  await page.locator(".notice").filter({ hasText: `Topic ${TOPIC} saved` }).waitFor();
  await page.locator(`tr[data-topic="${TOPIC}"] button:has-text("Status")`).click();
  await page.locator("#topic-offsets tbody tr").nth(3).waitFor();
  await shot("topics");

  // Delete, with the confirmation accepted: the row goes.
  await page.fill("#new-topic", SCRATCH);
  await page.click("#create-topic");
  await page.locator(`tr[data-topic="${SCRATCH}"]`).waitFor();
  page.once("dialog", (d) => d.accept());
  await page.locator(`tr[data-topic="${SCRATCH}"] button:has-text("Delete")`).click();
  await page.locator(".notice").filter({ hasText: `Topic ${SCRATCH} deleted` }).waitFor();
  assert.equal(await page.locator(`tr[data-topic="${SCRATCH}"]`).count(), 0);

  // Messages sent with tern-admin for a few seconds: the TPS chart moves.
  const sent = [];
  const started = Date.now();
  for (let i = 0; Date.now() - started < 4000 || i < 20; i++) {
    const key = i === 7 ? "order-42" : `order-${1000 + i}`;
    const body = i === 7 ? JSON.stringify({ order: 42, item: "tea", qty: 3 }) : `plain body ${i}`;
    admin("sendMessage", "-t", TOPIC, "-p", body, "-k", key);
    sent.push(key);
  }
  log(`sent ${sent.length} messages`);
  await page.goto(URL_ + "/#/overview");
  await page.waitForFunction(() => {
    const c = document.getElementById("tps-chart");
    return c && Number(c.dataset.putMax) > 0;
  }, null, { timeout: 20000 });

  // A consumer group reads them: its lag on the Consumer page falls to 0.
  await step(`sent ${sent.length}`, "consuming");
  await page.goto(URL_ + "/#/group/" + GROUP);
  await page.waitForFunction((n) => {
    const lag = document.getElementById("group-lag");
    const rows = [...document.querySelectorAll("#group-queues tbody tr")]
      .filter((r) => !r.cells[0].textContent.startsWith("%RETRY%"));
    const consumed = rows.reduce((s, r) => s + Number(r.cells[4].textContent), 0);
    return lag && lag.textContent === "0" && consumed === n;
  }, sent.length, { timeout: 30000 });
  await page.locator("#group-connections tbody tr").first().waitFor();
  await shot("consumer");
  await page.goto(URL_ + "/#/groups");
  await page.locator(`#groups a:text-is("${GROUP}")`).waitFor();
  await shot("groups");

  // The test's producer, connected in its group.
  await page.goto(URL_ + "/#/producers");
  await page.fill("input[name=group]", "ConsoleProducers");
  await page.fill("input[name=topic]", "ConsoleOther");
  // Until its heartbeat reached the broker (the page says "not online" before that).
  for (let i = 0; ; i++) {
    await page.click("#producer-form button");
    await page.waitForTimeout(300);
    if (await page.locator("#producer-result tbody tr").count() > 0) break;
    assert.ok(i < 50, "the producer never showed: " + (await errorBanner().innerText()));
  }
  assert.match(await text("#producer-result"), /RUST|JAVA|CPP|GO|PYTHON/);
  await shot("producers");

  // Find a message by key and open its body, as text and as pretty JSON.
  await page.goto(URL_ + "/#/messages");
  await page.fill("#key-topic", TOPIC);
  await page.fill("#key", "order-42");
  await page.click("#search-key");
  await page.locator("#message-results a:has-text('Detail')").first().waitFor();
  assert.equal(await page.locator("#message-results tbody tr").count(), 1, "one message has key order-42");
  await shot("messages");
  await page.locator("#message-results a:has-text('Detail')").first().click();
  await page.locator("#message-body").waitFor();
  assert.match(await text("#message-body"), /"item":"tea"/);
  await page.click('#body-view button[data-view="json"]');
  assert.match(await text("#message-body"), /\n {2}"item": "tea"/);
  assert.match(await text("#message-facts"), /order-42/);
  await page.locator(`#message-track tr[data-group="${GROUP}"]`).filter({ hasText: "CONSUMED" }).waitFor();
  await shot("message");
  // Re-send it to the group's consumer (CONSUME_MESSAGE_DIRECTLY): its listener ran it.
  await page.locator(`#message-track tr[data-group="${GROUP}"] button`).first().click();
  await page.locator(".notice").filter({ hasText: "CR_SUCCESS" }).waitFor();
  await step("resent order-42", "received");

  // The group's dead-letter queue: none yet, said so.
  await page.goto(URL_ + "/#/group/" + GROUP);
  await page.locator("a:has-text('Dead-letter messages')").click();
  await page.locator("#message-results").filter({ hasText: "No message found." }).waitFor();

  // Reset the group's offset to before the sends: it consumes them all again.
  await page.goto(URL_ + "/#/group/" + GROUP);
  await page.locator("#reset-time").waitFor();
  const before = new Date(started - 120000 - new Date().getTimezoneOffset() * 60000).toISOString().slice(0, 19);
  await page.fill("#reset-time", before);
  await page.selectOption("#reset-topic", TOPIC);
  await page.click("#reset-offset");
  await page.locator(".notice").filter({ hasText: `Offsets of ${GROUP} reset` }).waitFor();
  // Only the topic chosen: its retry topic kept its offsets.
  const resetNotice = await page.locator(".notice").innerText();
  assert.ok(resetNotice.includes(TOPIC) && !resetNotice.includes("%RETRY%"), resetNotice);
  await step("reset", "reconsumed");
  await page.waitForFunction(() => document.getElementById("group-lag")?.textContent === "0", null, { timeout: 30000 });
  // The overview's chart now shows both: what was produced and what was consumed.
  await page.goto(URL_ + "/#/overview");
  await page.waitForFunction(() => Number(document.getElementById("tps-chart")?.dataset.getMax) > 0, null, { timeout: 20000 });
  await shot("overview");

  // Delete the group (its consumer stopped first, or its heartbeat would bring it back):
  // it leaves the list, and its retry topic goes with it.
  await step("stop consumer", "stopped");
  await page.goto(URL_ + "/#/topics");
  await page.check("#show-system");
  await page.locator(`tr[data-topic="%RETRY%${GROUP}"]`).waitFor();
  await page.goto(URL_ + "/#/group/" + GROUP);
  page.once("dialog", (d) => d.accept());
  await page.click("#delete-group");
  await page.locator("#groups").waitFor();
  assert.equal(await page.locator(`#groups a:text-is("${GROUP}")`).count(), 0);
  await page.goto(URL_ + "/#/topics");
  await page.check("#show-system");
  await page.locator(`tr[data-topic="${TOPIC}"]`).waitFor();
  assert.equal(await page.locator(`tr[data-topic="%RETRY%${GROUP}"]`).count(), 0, "the retry topic stayed");

  // Errors a person can act on.
  // A message id that does not exist (a well-formed offset msgId past the log's end).
  const [host, port] = BROKER.split(":");
  const hex = (n, w) => n.toString(16).toUpperCase().padStart(w, "0");
  const bogus = host.split(".").map((o) => hex(Number(o), 2)).join("") + hex(Number(port), 8) + hex(0x7fffffff, 16);
  await page.goto(URL_ + "/#/messages");
  await page.fill("#msg-id", bogus);
  await page.click("#search-id");
  await errorBanner().waitFor();
  assert.match(await errorBanner().innerText(), /not find message|not found/);
  await shot("error-message-id");
  // A broker that refuses: the ACL page of a broker without ACL.
  await page.goto(URL_ + "/#/acl");
  // Waits for this page's error: the last page's may still show until the hash change runs.
  await errorShowing(/does not enable acl/);
  assert.match(await errorBanner().innerText(), /does not enable acl/);
  await shot("error-broker-refuses");
  // A name server that is down.
  await page.goto(DEAD + "/#/overview");
  await errorShowing(/name server/);
  assert.match(await errorBanner().innerText(), /name server/);
  assert.match(await page.locator("#main").innerText(), /could not be loaded/);
  await shot("error-namesrv-down");
  log("all steps passed");
} catch (e) {
  await shot("failure").catch(() => {});
  log("FAILED:", e.stack || e.message);
  process.exitCode = 1;
} finally {
  await browser.close();
  process.exit(process.exitCode || 0);
}
