import { register } from 'tsx/esm/api';

register();
const { stopTestPostgres } = await import('./start-postgres.ts');
export default stopTestPostgres;
