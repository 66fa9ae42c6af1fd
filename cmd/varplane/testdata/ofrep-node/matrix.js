// The Node.js side of TestOFREPNodeProviders: the published OpenFeature
// server SDK and OFREP provider against a varplane server. It prints one
// JSON line per phase; between "before" and "after" it waits for a line on
// stdin (the Go test publishes in between).
const { OpenFeature } = require('@openfeature/server-sdk');
const { OFREPProvider } = require('@openfeature/ofrep-provider');
const { OFREPApi } = require('@openfeature/ofrep-core');

const baseUrl = process.env.VARPLANE_OFREP_URL;
const token = process.env.VARPLANE_TOKEN;
const key = (k) => encodeURIComponent(k);
const user = { targetingKey: 'user-1', plan: 'pro' };

function pick(d) {
  return { value: d.value, variant: d.variant, reason: d.reason, errorCode: d.errorCode, flagMetadata: d.flagMetadata };
}

async function all(flags) {
  return {
    bool: pick(await flags.getBooleanDetails(key('agentic.lanes.vinci#/enabled'), false, user)),
    string: pick(await flags.getStringDetails(key('agentic.lanes.vinci#/name'), 'default', user)),
    number: pick(await flags.getNumberDetails(key('agentic.lanes.vinci#/ratio'), -1, user)),
    big: pick(await flags.getNumberDetails(key('agentic.lanes.vinci#/big'), -1, user)),
    object: pick(await flags.getObjectDetails(key('agentic.lanes.vinci#/limits'), {}, user)),
    whole: pick(await flags.getObjectDetails('agentic.lanes.vinci', {}, user)),
  };
}

// bulk is a bulk evaluation through the OFREP client of @openfeature/ofrep-core:
// its status, ETag and flags.
async function bulk(context, etag) {
  const headers = { Authorization: `Bearer ${token}` };
  if (etag) headers['If-None-Match'] = etag;
  const res = await new OFREPApi(baseUrl).postBulkEvaluateFlags({ context }, { headers });
  return { status: res.httpStatus, etag: res.httpResponse.headers.get('ETag'), flags: res.value && res.value.flags };
}

const bulkContext = { ...user, flags: ['agentic.lanes.vinci#/enabled', 'agentic.lanes.vinci#/name', 'agentic.lanes.vinci#/missing'] };

function line() {
  return new Promise((resolve) => process.stdin.once('data', resolve));
}

async function main() {
  await OpenFeature.setProviderAndWait('reader', new OFREPProvider({ baseUrl, headers: { Authorization: `Bearer ${token}` } }));
  await OpenFeature.setProviderAndWait('anonymous', new OFREPProvider({ baseUrl }));
  await OpenFeature.setProviderAndWait('forged', new OFREPProvider({ baseUrl, headers: { Authorization: 'Bearer forged' } }));
  const flags = OpenFeature.getClient('reader');

  const first = await bulk(bulkContext);
  const unchanged = await bulk(bulkContext, first.etag);
  const readable = await bulk({ targetingKey: 'user-1' });
  console.log(JSON.stringify({ phase: 'before', ...(await all(flags)) }));
  console.log(JSON.stringify({ phase: 'bulk', first, unchanged, readable }));
  await line();
  console.log(JSON.stringify({ phase: 'after', ...(await all(flags)) }));
  console.log(JSON.stringify({ phase: 'bulk-after', changed: await bulk(bulkContext, first.etag) }));

  const errors = {
    notFound: pick(await flags.getBooleanDetails(key('agentic.lanes.vinci#/missing'), true, user)),
    noScope: pick(await flags.getStringDetails(key('agentic.no.such#/x'), 'dflt', user)),
    malformed: pick(await flags.getStringDetails(key('agentic.lanes.vinci#/~2'), 'dflt', user)),
    typeMismatch: pick(await flags.getBooleanDetails(key('agentic.lanes.vinci#/name'), true, user)),
    numberAsString: pick(await flags.getStringDetails(key('agentic.lanes.vinci#/ratio'), 'dflt', user)),
    forbidden: pick(await flags.getBooleanDetails(key('other.scope#/on'), true, user)),
    anonymous: pick(await OpenFeature.getClient('anonymous').getBooleanDetails(key('agentic.lanes.vinci#/enabled'), true, user)),
    forged: pick(await OpenFeature.getClient('forged').getBooleanDetails(key('agentic.lanes.vinci#/enabled'), true, user)),
  };
  console.log(JSON.stringify({ phase: 'errors', ...errors }));
  await OpenFeature.close();
}

main().then(() => process.exit(0), (err) => { console.error(err); process.exit(1); });
