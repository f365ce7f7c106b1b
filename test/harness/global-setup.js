// Jest loads global setup outside its module system, so the TypeScript harness runs through tsx here.
import { register } from 'tsx/esm/api';

register();
const { startTestPostgres } = await import('./start-postgres.ts');
export default startTestPostgres;
