import { describe, expect, it } from '@jest/globals';
import { checkManifest, soapFieldPath } from './validate.js';

type Json = Record<string, unknown>;

const BODY = '<ns:QueryPartners xmlns:ns="urn:demo:siebel:partners"><ns:PageSize>{{page_size}}</ns:PageSize><ns:StartRowNum>{{start_row}}</ns:StartRowNum></ns:QueryPartners>';

const soapEndpoint = (over: Json = {}, soap: Json = {}): Json => ({
  id: 'siebel-partners',
  path: '/siebel/start.swe',
  soap: { version: '1.1', action: 'QueryPartners', body: BODY, records: 'Partner', stop: { flag: 'LastPage', when: 'true' }, ...soap },
  pagination: { kind: 'soap', page_size: 100, start_row: 0 },
  target: { kind: 'hybrid', table: 'ext.soap_siebel_partners', unique_key: 'id', promote: [{ name: 'city', path: 'city', type: 'text' }] },
  ...over,
});

const manifest = (endpoints: Json[], type = 'soap-generic'): Json => ({
  apiVersion: 'connectors.svc.io/v1',
  kind: 'Connector',
  metadata: { name: 'crm' },
  connector_type: type,
  scopes: ['crm'],
  spec: { base_url: 'http://localhost:8099', auth: { kind: 'basic', username: 'demo', password_env: 'DEMO_PASSWORD' }, endpoints },
});

const errorsOf = (m: Json) => Object.fromEntries(checkManifest(m).errors.map((e) => [e.field, e.message]));

describe('soap-generic manifests', () => {
  it('normalise to a POST with the SOAP call, soap paging and target paths as JSONPath', () => {
    const result = checkManifest(manifest([soapEndpoint({}, { session: { token_env: 'CRM_SESSION_TOKEN', header: '<ns:SessionToken xmlns:ns="urn:x">{{token}}</ns:SessionToken>' } })]));
    expect(result.errors).toEqual([]);
    expect(result.connector!.connectorType).toBe('soap-generic');
    expect(result.connector!.endpoints[0]).toEqual({
      id: 'siebel-partners',
      enabled: true,
      method: 'POST',
      path: '/siebel/start.swe',
      graphql: false,
      soap: {
        version: '1.1',
        action: 'QueryPartners',
        body: BODY,
        records: 'Partner',
        stop: { flag: 'LastPage', when: 'true' },
        session: { token_env: 'CRM_SESSION_TOKEN', header: '<ns:SessionToken xmlns:ns="urn:x">{{token}}</ns:SessionToken>' },
      },
      pagination: { kind: 'soap', page_size: 100, start_row: 0 },
      incremental: { mode: 'full' },
      target: { kind: 'hybrid', table: 'ext.soap_siebel_partners', unique_key: '$.id', promote: [{ name: 'city', path: '$.city', type: 'text' }] },
    });
  });

  it('defaults: version 1.1, pagination {kind: soap, page_size 50, start_row 0}', () => {
    const { pagination: _p, ...bare } = soapEndpoint({}, { version: undefined });
    const result = checkManifest(manifest([JSON.parse(JSON.stringify(bare))]));
    expect(result.errors).toEqual([]);
    expect(result.connector!.endpoints[0]!.pagination).toEqual({ kind: 'soap', page_size: 50, start_row: 0 });
    expect(result.connector!.endpoints[0]!.soap!.version).toBe('1.1');
  });

  it('field paths: a/b nested, @x an attribute, a JSONPath kept', () => {
    expect(soapFieldPath('id')).toBe('$.id');
    expect(soapFieldPath('address/city')).toBe('$.address.city');
    expect(soapFieldPath('@code')).toBe("$['@code']");
    expect(soapFieldPath('address/@kind')).toBe("$.address['@kind']");
    expect(soapFieldPath('credit-limit')).toBe("$['credit-limit']");
    expect(soapFieldPath('$.id')).toBe('$.id');
    expect(soapFieldPath('@a/b')).toBeUndefined();
    expect(soapFieldPath('a//b')).toBeUndefined();
    expect(soapFieldPath('ns:id')).toBeUndefined();
  });

  it('errors name the field: records, unknown soap keys, version, stop, session, pagination', () => {
    expect(errorsOf(manifest([soapEndpoint({}, { records: 'ns:Partner' })]))).toEqual({
      'spec.endpoints[0].soap.records': 'spec.endpoints[0].soap.records must be the local name of an XML element (no prefix)',
    });
    expect(errorsOf(manifest([soapEndpoint({}, { records: undefined })]))).toEqual({ 'spec.endpoints[0].soap.records': 'spec.endpoints[0].soap.records is required' });
    for (const action of ['Q\r\nX-Evil: 1', 'Q\u2603']) {
      expect(errorsOf(manifest([soapEndpoint({}, { action })]))).toEqual({
        'spec.endpoints[0].soap.action': 'spec.endpoints[0].soap.action must be sendable in an HTTP header: tabs, printable ASCII and Latin-1 letters only (no line breaks)',
      });
    }
    // SOAP 1.1's SOAPAction is a URI reference between double quotes, with no escape: a double quote in the action
    // is refused (it was dropped from the header as sent). 1.2 carries it escaped in the content type's action parameter.
    for (const soap of [{ action: 'urn:a"b' }, { action: '"QueryPartners"' }, { version: undefined, action: '"' }]) {
      expect(errorsOf(manifest([soapEndpoint({}, soap)]))).toEqual({
        'spec.endpoints[0].soap.action':
          'spec.endpoints[0].soap.action must not contain a double quote (") with SOAP version 1.1: the SOAPAction header is the action as a URI reference between double quotes, which has no way to carry one (a URI writes it %22)',
      });
    }
    expect(checkManifest(manifest([soapEndpoint({}, { version: '1.2', action: 'urn:a"b' })])).errors).toEqual([]);
    expect(checkManifest(manifest([soapEndpoint({}, { action: 'urn:a%22b\\c' })])).errors).toEqual([]);
    expect(errorsOf(manifest([soapEndpoint({}, { envelope: 'x', page: 1 })]))).toEqual({
      'spec.endpoints[0].soap.envelope': 'spec.endpoints[0].soap.envelope is not a known field',
      'spec.endpoints[0].soap.page': 'spec.endpoints[0].soap.page is not a known field',
    });
    expect(Object.keys(errorsOf(manifest([soapEndpoint({}, { version: '1.3' })])))).toEqual(['spec.endpoints[0].soap.version']);
    expect(errorsOf(manifest([soapEndpoint({}, { stop: { flag: 'LastPage' } })]))).toEqual({ 'spec.endpoints[0].soap.stop.when': 'spec.endpoints[0].soap.stop.when is required' });
    expect(errorsOf(manifest([soapEndpoint({}, { session: { token_env: 'T', header: '<x/>' } })]))).toEqual({
      'spec.endpoints[0].soap.session.header': 'spec.endpoints[0].soap.session.header must carry {{token}} where the session token goes',
    });
    expect(errorsOf(manifest([soapEndpoint({ pagination: { kind: 'offset', offset_param: 'o', limit_param: 'l' } })]))).toEqual({
      'spec.endpoints[0].pagination.kind': 'spec.endpoints[0].pagination.kind must be soap on a soap-generic endpoint ({kind: soap, page_size, start_row}); got "offset"',
    });
    expect(errorsOf(manifest([soapEndpoint({ pagination: { kind: 'soap', limit: 3 } })]))).toEqual({
      'spec.endpoints[0].pagination.limit': 'spec.endpoints[0].pagination.limit is not a field of pagination kind soap',
    });
    expect(errorsOf(manifest([soapEndpoint({ soap: undefined })]))).toEqual({
      'spec.endpoints[0].soap': 'spec.endpoints[0].soap is required for connector_type soap-generic (version, action, body, records, stop, session)',
    });
    expect(errorsOf(manifest([soapEndpoint({ method: 'GET', body: 'x' })]))).toEqual({
      'spec.endpoints[0].method': 'spec.endpoints[0].method is not used by soap-generic endpoints: each request POSTs the envelope built from spec.endpoints[0].soap',
      'spec.endpoints[0].body': 'spec.endpoints[0].body is not used by soap-generic endpoints: each request POSTs the envelope built from spec.endpoints[0].soap',
    });
    expect(errorsOf(manifest([soapEndpoint({ target: { table: 'ext.x', unique_key: 'a b' } })]))).toEqual({
      'spec.endpoints[0].target.unique_key':
        "spec.endpoints[0].target.unique_key must name the record's children by local name (id, a/b for a nested child, @x for an attribute, a/@x) or be a JSONPath starting with $",
    });
  });

  it('a rest-generic connector refuses soap and keeps JSONPath target paths', () => {
    expect(errorsOf(manifest([soapEndpoint({ target: { table: 'ext.x', unique_key: '$.id' } })], 'rest-generic'))).toEqual({
      'spec.endpoints[0].soap': 'spec.endpoints[0].soap is for connector_type soap-generic only',
      'spec.endpoints[0].pagination.kind': 'pagination kind soap is for connector_type soap-generic only',
    });
    expect(errorsOf(manifest([soapEndpoint()], 'rest-generic'))).toEqual({
      'spec.endpoints[0].target.unique_key': 'spec.endpoints[0].target.unique_key must be a JSONPath starting with $',
      'spec.endpoints[0].target.promote[0].path': 'spec.endpoints[0].target.promote[0].path must be a JSONPath starting with $',
    });
  });
});
