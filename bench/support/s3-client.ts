import { S3Client } from '@aws-sdk/client-s3';

/** An S3 client of the benchmark's S3-compatible stand-in: path-style, its keys, checksums only where an operation requires them (as the export destination sends). */
export function standInClient(at: { endpoint: string; region: string; accessKeyId: string; secretAccessKey: string }): S3Client {
  return new S3Client({
    region: at.region,
    endpoint: at.endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: at.accessKeyId, secretAccessKey: at.secretAccessKey },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  });
}
