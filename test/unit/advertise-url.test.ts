/**
 * The URL a node advertises (src/gateway/advertise-url.ts): `--url` as given; `--advertise-host`
 * (the Helm chart's pod IP) on the listen port, an IPv6 address in brackets; without either, a
 * wildcard listen address is never advertised (a router calling http://0.0.0.0:8080 reaches its own
 * machine).
 */
import assert from 'node:assert/strict';
import type { NetworkInterfaceInfo } from 'node:os';
import { describe, test } from 'node:test';
import { advertiseHostUrl, advertiseUrl, defaultAdvertiseUrl, httpUrl } from '../../src/gateway/advertise-url.ts';

const v4 = (address: string, internal = false): NetworkInterfaceInfo => ({ address, netmask: '255.255.255.0', family: 'IPv4', mac: '00:00:00:00:00:00', internal, cidr: `${address}/24` });
const v6 = (address: string, scopeid = 0, internal = false): NetworkInterfaceInfo => ({ address, netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', mac: '00:00:00:00:00:00', internal, cidr: `${address}/64`, scopeid });
const lo = [v4('127.0.0.1', true), v6('::1', 0, true)];

describe('defaultAdvertiseUrl', () => {
  test('a listen address is advertised as is, an IPv6 one in brackets', () => {
    assert.equal(defaultAdvertiseUrl('10.1.2.3', 8080, { lo }), 'http://10.1.2.3:8080');
    assert.equal(defaultAdvertiseUrl('127.0.0.1', 8101, { lo }), 'http://127.0.0.1:8101');
    assert.equal(defaultAdvertiseUrl('node1.internal', 8080, { lo }), 'http://node1.internal:8080');
    assert.equal(defaultAdvertiseUrl('fd00::5', 8080, { lo }), 'http://[fd00::5]:8080');
    assert.equal(httpUrl('::1', 9), 'http://[::1]:9');
    assert.doesNotThrow(() => new URL(defaultAdvertiseUrl('fd00::5', 8080, { lo })));
  });

  test("0.0.0.0 and ::: the machine's one non-loopback address (IPv4 first; for :: an IPv6 one when there is no IPv4)", () => {
    const pod = { lo, eth0: [v4('10.244.1.7'), v6('fe80::1', 2)] };
    assert.equal(defaultAdvertiseUrl('0.0.0.0', 8080, pod), 'http://10.244.1.7:8080');
    assert.equal(defaultAdvertiseUrl('::', 8080, pod), 'http://10.244.1.7:8080');
    assert.equal(defaultAdvertiseUrl('::', 8080, { lo, eth0: [v6('fe80::1', 2), v6('fd00::7')] }), 'http://[fd00::7]:8080');
  });

  test('a wildcard with no, or several, non-loopback addresses is refused, naming them and --url', () => {
    assert.throws(() => defaultAdvertiseUrl('0.0.0.0', 8080, { lo }), /listens on 0\.0\.0\.0 and this machine has no non-loopback address: pass --url/);
    assert.throws(
      () => defaultAdvertiseUrl('0.0.0.0', 8080, { lo, eth0: [v4('10.0.0.2')], eth1: [v4('192.168.1.2')] }),
      /several addresses \(10\.0\.0\.2, 192\.168\.1\.2\): pass --url with the URL routers and other nodes reach it at \(e\.g\. --url http:\/\/<its address>:8080\)/,
    );
    assert.throws(() => defaultAdvertiseUrl('0.0.0.0', 8080, { lo, eth0: [v6('fd00::7')] }), /no non-loopback address/);
  });
});

describe('advertiseUrl: --url, --advertise-host, or the listen address', () => {
  const base = { host: '0.0.0.0', port: 8080, resolveWildcard: true };

  test('--advertise-host (the chart passes the pod IP): IPv4 as is, IPv6 in brackets, on the listen port', () => {
    assert.equal(advertiseUrl({ ...base, advertiseHost: '10.244.1.7' }, { lo }), 'http://10.244.1.7:8080');
    assert.equal(advertiseUrl({ ...base, advertiseHost: 'fd00::1' }, { lo }), 'http://[fd00::1]:8080');
    assert.equal(advertiseUrl({ ...base, port: 9001, advertiseHost: '2001:db8:0:1::a' }, { lo }), 'http://[2001:db8:0:1::a]:9001');
    assert.equal(advertiseHostUrl('[fd00::1]', 8080), 'http://[fd00::1]:8080', 'already bracketed: kept');
    assert.equal(advertiseHostUrl('qr-node-0.qr-node.llm.svc', 8080), 'http://qr-node-0.qr-node.llm.svc:8080');
    // What a router and a peer do with it: a URL whose host is the address.
    assert.equal(new URL(advertiseHostUrl('fd00::1', 8080)).hostname, '[fd00::1]');
    assert.equal(new URL(advertiseHostUrl('fd00::1', 8080)).port, '8080');
  });

  test('--url wins as given; with neither, the listen address (a wildcard resolved only with Redis membership)', () => {
    assert.equal(advertiseUrl({ ...base, url: 'http://gw-1.example:80' }, { lo }), 'http://gw-1.example:80');
    assert.equal(advertiseUrl({ ...base, host: 'fd00::5' }, { lo }), 'http://[fd00::5]:8080');
    assert.equal(advertiseUrl(base, { lo, eth0: [v4('10.244.1.7')] }), 'http://10.244.1.7:8080');
    assert.equal(advertiseUrl({ ...base, resolveWildcard: false }, { lo }), 'http://0.0.0.0:8080');
  });

  test('refuses both options, a wildcard or empty host, and an unexpanded $(POD_IP)', () => {
    assert.throws(() => advertiseUrl({ ...base, url: 'http://a:1', advertiseHost: '10.0.0.1' }), /^Error: --url and --advertise-host: give one of them$/);
    for (const host of ['', '0.0.0.0', '::', '[::]']) {
      assert.throws(() => advertiseHostUrl(host, 8080), /a wildcard or empty address is not one routers can reach/, host);
    }
    assert.throws(() => advertiseHostUrl('$(POD_IP)', 8080), /--advertise-host "\$\(POD_IP\)": not an IP address or a DNS name/);
    assert.throws(() => advertiseHostUrl('http://10.0.0.1', 8080), /not an IP address or a DNS name/);
  });
});
