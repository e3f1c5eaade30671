'use strict';

// Consume with an ali-ons cluster-mode push Consumer whose handler fails the first deliveries.
//
//   node retry.js --namesrv HOST:PORT --topic TOPIC --group GROUP --expect N --fail K
//                 [--timeout SECONDS]
//
// The handler throws for the first K deliveries of each message (messages are told apart by
// body), so ali-ons sends each failure back (CONSUMER_SEND_MSG_BACK, docs/protocol.md §11.5) and
// the message returns through %RETRY%GROUP. Output line per delivery, in delivery order:
//   {"topic", "body", "msgId", "originMessageId", "reconsumeTimes", "failed", "at"}
// ("at" is the local time in ms). Once N distinct messages have been handled successfully the
// consumer is closed (which persists its offsets) and the script exits 0; exit 3 on timeout.

const { Consumer } = require('ali-ons');
const { httpclient, logger, parseArgs, emit, exit, hardTimeout } = require('./common');

const args = parseArgs(process.argv.slice(2), {
  script: 'retry.js',
  options: {
    namesrv: 'HOST:PORT', topic: 'TOPIC', group: 'CONSUMER_GROUP', expect: 'N', fail: 'K',
    timeout: 'SECONDS',
  },
  required: ['namesrv', 'topic', 'group', 'expect', 'fail'],
  defaults: { timeout: '60' },
});

async function main() {
  hardTimeout(args.timeout, 'retry.js');
  const expected = Number(args.expect);
  const failures = Number(args.fail);
  const deliveries = new Map();  // body -> deliveries so far
  const succeeded = new Set();
  let resolveDone;
  const done = new Promise(resolve => { resolveDone = resolve; });

  const consumer = new Consumer({
    httpclient,
    logger,
    nameSrv: args.namesrv,
    consumerGroup: args.group,
  });
  consumer.on('error', err => console.error('[consumer error]', err));

  consumer.subscribe(args.topic, '*', async msg => {
    const body = msg.body ? msg.body.toString('utf8') : '';
    const count = (deliveries.get(body) || 0) + 1;
    deliveries.set(body, count);
    const failed = count <= failures;
    emit({
      topic: msg.topic,
      body,
      msgId: msg.msgId,
      originMessageId: msg.originMessageId || null,
      reconsumeTimes: msg.reconsumeTimes,
      failed,
      at: Date.now(),
    });
    if (failed) {
      throw new Error(`retry.js: delivery ${count} of ${body} fails on purpose`);
    }
    succeeded.add(body);
    if (succeeded.size >= expected) {
      resolveDone();
    }
  });
  await consumer.ready();
  await done;
  // let ali-ons mark the last message consumed before close() persists the offsets
  await new Promise(resolve => setImmediate(resolve));
  await consumer.close();
  console.error(`retry.js: ${succeeded.size} messages handled, consumer closed`);
}

main().then(() => exit(0), err => {
  console.error('retry.js failed:', err);
  exit(1);
});
